// Found by fuzz_tokenizer: the streaming decoder and detokenize_text must show a person the same
// text for the same ids (the workbench streams TokenEvent pieces; GenerateResult::text is the
// whole), including where invalid UTF-8 is replaced by U+FFFD.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

using namespace tinyloop;

namespace {

std::string streamed(const Model* m, const std::vector<int32_t>& ids) {
    StreamDecoder d(m);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    return out + d.flush();
}

TEST(StreamDecode, InvalidUtf8GivesTheSameTextStreamedAndWhole) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(tltest::write_random_model("stream_decode.tinyloop", tltest::small_hparams()));
    // Byte tokens. "\xe0\xb9" is a valid prefix of a 3-byte sequence, then "\xf1" breaks it.
    const std::vector<std::vector<int32_t>> cases = {
        {0xe0, 0xb9, 0xf1, 0x11},  // fuzz_tokenizer crash-86071f61 (reduced)
        {0xe2, 0x80, 'h'},
        {0xf0, 0x9f, 0x98, 'x'},
        {0xc3, 0xc3, 0xa9},
        {0xed, 0xa0, 0x80},
        {0xe2, 0x80},
    };
    for (const auto& ids : cases) {
        const std::string whole = detokenize_text(m.get(), ids.data(), ids.size());
        EXPECT_EQ(streamed(m.get(), ids), whole) << "ids starting " << ids[0] << ", " << ids.size() << " ids";
        EXPECT_EQ(whole, sanitize_utf8(detokenize(m.get(), ids.data(), ids.size())));
    }
}

}  // namespace
