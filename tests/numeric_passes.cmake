# The numeric suites again with each kernel switch forced, so that every path this host can
# execute is executed, not only the one its CPU picks by default (golden_transcript/CMakeLists.txt
# does the same for the transcript):
#   amx_off       TINYLOOP_AMX=0        the VNNI panel kernel for calls of 16+ tokens on AMX CPUs
#   panels_off    TINYLOOP_I8_PANELS=0  the row-major int8 kernels at AVX-512
#   int8_act_off  TINYLOOP_INT8_ACT=0   the float-activation kernels for q8/q4
#   f32_panels_off TINYLOOP_F32_PANELS=0 the row-major f32/bf16 kernels (golden forward only)
#   simd_avx2     TINYLOOP_SIMD=avx2    the whole process at AVX2 (as on an AVX2-only laptop)
#   simd_scalar   TINYLOOP_SIMD=scalar  the whole process without SIMD
# The op table (test_backend_ops) already runs every SIMD level the CPU has, so it runs here only
# for the switches, filtered to the cases they change (the q8/q4 products). A level the CPU lacks
# is refused by load_model with "TINYLOOP_SIMD=<level> refused: this CPU has no <level> (...)":
# that line marks the pass skipped, with the reason, instead of failed.
set(TL_NUMERIC_INT8_CASES "*_matmul_q4_*:*_matmul_q8_*:*_matmul_fused_q4:*_matmul_fused_q8")
foreach(pass amx_off panels_off int8_act_off f32_panels_off simd_avx2 simd_scalar)
  if(pass STREQUAL "amx_off")
    set(env "TINYLOOP_AMX=0")
  elseif(pass STREQUAL "panels_off")
    set(env "TINYLOOP_I8_PANELS=0")
  elseif(pass STREQUAL "int8_act_off")
    set(env "TINYLOOP_INT8_ACT=0")
  elseif(pass STREQUAL "f32_panels_off")
    set(env "TINYLOOP_F32_PANELS=0")
  elseif(pass STREQUAL "simd_avx2")
    set(env "TINYLOOP_SIMD=avx2")
  else()
    set(env "TINYLOOP_SIMD=scalar")
  endif()
  set(tests numeric.${pass}.golden_forward)
  add_test(NAME numeric.${pass}.golden_forward COMMAND test_golden_forward)
  if(NOT pass MATCHES "^simd_|^f32_")
    list(APPEND tests numeric.${pass}.backend_ops)
    add_test(NAME numeric.${pass}.backend_ops COMMAND test_backend_ops --gtest_filter=${TL_NUMERIC_INT8_CASES})
  endif()
  set_tests_properties(${tests} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 600 LABELS numeric
                       SKIP_REGULAR_EXPRESSION "TINYLOOP_SIMD=[a-z0-9-]+ refused: this CPU has no ")
endforeach()
