#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype_convert.h"
#include "core/half.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "kiln/error.h"

using namespace kiln;

TEST(Tensor, ShapeAndReshape) {
    Tensor t({2, 3});
    EXPECT_EQ(t.numel(), 6);
    EXPECT_EQ(t.dim(-1), 3);
    Tensor r = t.reshaped({3, 2});
    EXPECT_EQ(r.dim(0), 3);
    EXPECT_THROW(t.reshaped({4, 2}), Error);
}

TEST(Half, RoundTripsEveryFiniteHalf) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf/nan
        EXPECT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
    }
}

TEST(Half, KnownValues) {
    EXPECT_EQ(half_to_float(0x3c00), 1.0f);
    EXPECT_EQ(half_to_float(0xc000), -2.0f);
    EXPECT_EQ(half_to_float(0x0001), 5.960464477539063e-08f);
    EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds to infinity
}

// 16-bit tensors: every F16 code converts to the float half_to_float gives (the F16C path included),
// memory counts 2 bytes a value, and float32-only access is a clear error rather than a bad read.
TEST(Tensor, SixteenBitStorage) {
    std::vector<uint16_t> codes(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h) codes[h] = static_cast<uint16_t>(h);
    const int64_t before = memory_stats().device("cpu").total.current;
    const Tensor t = Tensor::from_bits16({256, 256}, DType::F16, codes);
    EXPECT_EQ(memory_stats().device("cpu").total.current - before, 0x10000 * 2);
    EXPECT_EQ(t.dtype(), DType::F16);
    EXPECT_EQ(t.numel(), 0x10000);
    const Tensor f = t.to_f32();
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float want = half_to_float(static_cast<uint16_t>(h));
        if (want != want) EXPECT_NE(f[h], f[h]) << h;  // NaN stays NaN
        else EXPECT_EQ(f[h], want) << h;
    }
    EXPECT_THROW((void)t.data(), Error);
    EXPECT_THROW((void)f.bits16(), Error);
    EXPECT_THROW(Tensor::from_bits16({3}, DType::F16, {1, 2}), Error);
    EXPECT_THROW(Tensor::from_bits16({1}, DType::F32, {1}), Error);

    const Tensor r = t.reshaped({0x10000});
    EXPECT_EQ(r.dtype(), DType::F16);
    EXPECT_EQ(r.bits16()[0x3c00], 0x3c00);
}

TEST(Tensor, ConvertedRoundsToNearestEven) {
    const Tensor x({3}, {1.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f * 1.5f});
    const Tensor h = x.converted(DType::F16);
    EXPECT_EQ(h.bits16()[0], 0x3c00);
    EXPECT_EQ(h.bits16()[1], 0x3c00);  // a tie goes to the even neighbour
    const Tensor b = x.converted(DType::BF16);
    EXPECT_EQ(b.to_f32()[2], 1.0f + 0x1p-7f);  // 1 + 1.5 ulp of bf16 rounds to 1 + 2 ulp
    EXPECT_EQ(b.converted(DType::F32).dtype(), DType::F32);
}

// The bulk conversion (eight at a time with F16C where the CPU has it) gives float_to_half's bits for every
// float: a spread of 2^22 bit patterns over all exponents, signs, subnormals, infinities and NaNs, in runs
// of odd lengths so that vector groups and the scalar tail both see them, and each half's rounding ties.
TEST(Tensor, BulkHalfConversionMatchesTheScalarOne) {
    std::vector<float> values;
    for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 1021) {  // 1021: prime, so low bits vary
        float f;
        const uint32_t b = uint32_t(bits);
        std::memcpy(&f, &b, 4);
        values.push_back(f);
    }
    for (uint32_t h = 0; h < 0x10000; ++h) {  // each half's value and the ties just above it
        const float f = half_to_float(uint16_t(h));
        uint32_t b;
        std::memcpy(&b, &f, 4);
        for (uint32_t tie : {b, b + 0x1000, b + 0x0fff, b + 0x1001}) {
            float g;
            std::memcpy(&g, &tie, 4);
            values.push_back(g);
        }
    }
    for (size_t begin = 0, len = 1; begin < values.size(); begin += len, len = len % 37 + 3) {
        const size_t n = std::min(len, values.size() - begin);
        std::vector<uint16_t> got(n);
        encode_from_float(DType::F16, values.data() + begin, reinterpret_cast<uint8_t*>(got.data()), n);
        for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(got[i], float_to_half(values[begin + i])) << "float bits of value " << begin + i;
        }
    }
}

TEST(Tensor, MovedFromIsEmpty) {
    Tensor a({2, 3});
    Tensor b = std::move(a);
    EXPECT_EQ(b.numel(), 6);
    EXPECT_EQ(a.numel(), 0);  // NOLINT(bugprone-use-after-move): the state is the point
    EXPECT_TRUE(a.empty());
}

TEST(Tensor, RowToF32MatchesTheWholeConversion) {
    const Tensor f({3, 5}, {0.1f, -2.f, 3.3f, 4.f, 5.5f, 6.f, 7.25f, -8.f, 9.f, 10.f, 1e-5f, 12.f, 13.f, -1e4f, 15.f});
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
        const Tensor t = f.converted(d), all = t.to_f32();
        for (int64_t r = 0; r < 3; ++r) {
            float row[5];
            t.row_to_f32(r, row);
            for (int c = 0; c < 5; ++c) EXPECT_EQ(row[c], all[r * 5 + c]) << dtype_name(d) << " " << r << "," << c;
        }
        float row[5];
        EXPECT_THROW(t.row_to_f32(3, row), Error);
        EXPECT_THROW(t.row_to_f32(-1, row), Error);
    }
}

// first_values hands the front of the storage on without copying, and the accounting keeps counting
// the whole storage (it is still allocated) until the result goes.
TEST(Tensor, FirstValuesKeepsTheStorage) {
    const auto current = [] { return memory_stats().device("cpu").total.current; };
    const int64_t before = current();
    Tensor t({2, 3, 4});
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(i);
    const float* storage = t.data();
    Tensor front = std::move(t).first_values({1, 3, 4});
    EXPECT_TRUE(t.empty());
    EXPECT_EQ(front.shape(), (Shape{1, 3, 4}));
    EXPECT_EQ(front.numel(), 12);
    EXPECT_EQ(front.data(), storage);
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(front[i], float(i));
    EXPECT_EQ(current() - before, 24 * 4);
    front = Tensor();
    EXPECT_EQ(current(), before);
    EXPECT_THROW(Tensor({2, 2}).first_values({5}), Error);
}

// A view reads memory it does not own and counts it in the category it is given; a copy of it is a view
// of the same memory; the first non-const float32 access gives the tensor its own copy (counted as
// tensors are), so the memory it viewed is never written.
TEST(Tensor, ViewReadsInPlaceAndCopiesBeforeAnyWrite) {
    const auto current = [](MemoryCategory c) { return memory_stats().device("cpu")[c].current; };
    auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
    const float* memory = owner->data();
    const int64_t mapped = current(MemoryCategory::MappedFile), made = current(MemoryCategory::Activations);
    const Tensor v =
        Tensor::view({2, 3}, DType::F32, std::shared_ptr<const void>(owner, memory), MemoryCategory::MappedFile);
    EXPECT_TRUE(v.is_view());
    EXPECT_EQ(current(MemoryCategory::MappedFile) - mapped, 24);
    EXPECT_EQ(current(MemoryCategory::Activations), made);
    EXPECT_EQ(v.data(), memory);
    EXPECT_EQ(v[4], 5.0f);
    EXPECT_THROW((void)v.values(), Error);  // no vector to hand out
    float row[3];
    v.row_to_f32(1, row);
    EXPECT_EQ(row[2], 6.0f);

    const Tensor shared = v;  // a copy of a view is a view of the same memory, counted in its category
    EXPECT_TRUE(shared.is_view());
    EXPECT_EQ(shared.data(), memory);
    EXPECT_EQ(current(MemoryCategory::MappedFile) - mapped, 48);
    EXPECT_EQ(current(MemoryCategory::Activations), made);
    const Tensor reshaped = v.reshaped({3, 2});
    EXPECT_EQ(reshaped.data(), memory);
    {
        const Tensor f = v.to_f32();  // const: a temporary's data() would be the non-const one, a copy
        EXPECT_EQ(f.data(), memory);
    }
    EXPECT_EQ(current(MemoryCategory::MappedFile) - mapped, 72);  // v, shared, reshaped

    Tensor own = v;
    own.data()[0] = 100.0f;  // copy on write
    EXPECT_FALSE(own.is_view());
    EXPECT_NE(own.data(), memory);
    EXPECT_EQ(current(MemoryCategory::Activations) - made, 24);
    EXPECT_EQ(current(MemoryCategory::MappedFile) - mapped, 72);  // own's count moved to activations
    EXPECT_EQ((*owner)[0], 1.0f);
    EXPECT_EQ(own[0], 100.0f);
    EXPECT_EQ(own[5], 6.0f);

    // The view keeps its owner alive.
    std::weak_ptr<std::vector<float>> watch = owner;
    owner.reset();
    EXPECT_FALSE(watch.expired());
    EXPECT_EQ(v[5], 6.0f);
}

TEST(Tensor, SixteenBitViews) {
    auto owner = std::make_shared<std::vector<uint16_t>>(std::vector<uint16_t>{0x3c00, 0xc000, 0x3800, 0x0000});
    const Tensor v = Tensor::view({2, 2}, DType::F16, std::shared_ptr<const void>(owner, owner->data()),
                                  MemoryCategory::MappedFile);
    EXPECT_EQ(v.bits16(), owner->data());
    EXPECT_THROW((void)v.data(), Error);
    const Tensor f = v.to_f32();
    EXPECT_EQ(f[1], -2.0f);
    EXPECT_EQ(v.converted(DType::F16).bits16(), owner->data());  // already F16: the same view
    EXPECT_EQ(v.converted(DType::BF16).to_f32()[2], 0.5f);
    const Tensor front = Tensor(v).first_values({1, 2});
    EXPECT_EQ(front.bits16(), owner->data());
}

TEST(Tensor, ViewsRefuseWhatTheyCannotRead) {
    auto owner = std::make_shared<std::vector<uint8_t>>(16);
    const auto at = [&](int skip) { return std::shared_ptr<const void>(owner, owner->data() + skip); };
    constexpr MemoryCategory kMapped = MemoryCategory::MappedFile;
    EXPECT_THROW(Tensor::view({2}, DType::F16, at(1), kMapped), Error);
    EXPECT_THROW(Tensor::view({2}, DType::F32, at(2), kMapped), Error);
    EXPECT_THROW(Tensor::view({2}, DType::I64, at(0), kMapped), Error);
    EXPECT_THROW(Tensor::view({2}, DType::F32, nullptr, kMapped), Error);
    const Tensor empty = Tensor::view({0, 4}, DType::F32, nullptr, kMapped);
    EXPECT_TRUE(empty.empty());
    EXPECT_FALSE(empty.is_view());
}
