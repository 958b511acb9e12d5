# The steps of the CTest test llama_cpp.parity (llama_cpp.cmake): export models with the CLI and
# compare llama.cpp's logits on them with ours (llama_parity.cpp).
#   cmake -DCLI=tinyloop -DPARITY=llama_parity -DROOT=<repo> -DWORK=<dir> -P llama_parity.cmake
file(MAKE_DIRECTORY ${WORK})

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit status ${rc}")
  endif()
endfunction()

# A random model with grouped-query attention (4 query heads over 2 kv heads) and a padded
# vocabulary, at depth 3 (7 unrolled blocks): f32 must agree to float rounding; f16 weights
# differ only by llama.cpp rounding the activations to f16 in its f16 matmuls.
set(random ${WORK}/random.tinyloop)
step(${CLI} make-random ${random} --d-model 64 --n-heads 4 --n-kv-heads 2 --head-dim 16 --d-ff 128
     --vocab 300 --n-pre 1 --n-loop 2 --loops 3 --max-loops 6 --max-seq-len 128 --seed 7)
set(ids "256,10,84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120,46,10,49,50,51,32,43,32,52,53,54,32,61,32,63")
step(${CLI} export-gguf ${random} ${WORK}/random-f32.gguf --loops 3 --dtype f32)
step(${PARITY} ${random} ${WORK}/random-f32.gguf --loops 3 --ids ${ids} --tolerance 1e-4)
step(${CLI} export-gguf ${random} ${WORK}/random-f16.gguf --loops 3 --dtype f16)
step(${PARITY} ${random} ${WORK}/random-f16.gguf --loops 3 --ids ${ids} --tolerance 1e-2)

# The bundled trained model at depth 6: its tokenizer through llama.cpp's on a verse, and the logits.
set(kjv ${ROOT}/resources/models/tinyloop-kjv/model-f32.tinyloop)
step(${CLI} export-gguf ${kjv} ${WORK}/kjv-f32.gguf --loops 6 --dtype f32)
step(${PARITY} ${kjv} ${WORK}/kjv-f32.gguf --loops 6 --text
     "In the beginning God created the heaven and the earth. And the earth was without form, and void."
     --tolerance 1e-4)
# Numbers, contractions, non-ASCII letters and punctuation, runs of whitespace: where GPT-2's
# pretokenizer and ours (FORMAT.md §3) are written differently. (No semicolons: CMake would split
# the argument there.)
step(${PARITY} ${kjv} ${WORK}/kjv-f32.gguf --loops 6 --text
     "Genesis 1:31 and 12,345 things, can't won't! café — naïve? 'Tis  well.\n\t end  " --tolerance 1e-4)
