#include "shoal/fl/wire/update_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "shoal/fl/wire/architectures.h"
#include "shoal/v1/fl.pb.h"

namespace shoal::model {
namespace {

// fc1.weight [4,3], fc1.bias [4], fc2.weight [2,4], fc2.bias [2]
ModelSpec SmallSpec() { return MlpSpec(3, {4}, 2); }

UpdateMeta Meta() {
  UpdateMeta m;
  m.job = "fmnist";
  m.client_id = "c7";
  m.token = "secret";
  m.base_version = 12;
  m.num_samples = 600;
  m.local_steps = 50;
  m.train_seconds = 1.25;
  return m;
}

std::vector<std::byte> ValidBody(DType d = DType::kF32, uint64_t seed = 1) {
  return EncodeUpdate(Meta(), InitModel(SmallSpec(), seed), d).value();
}

// A body split back into its header and tensor area, to be changed and framed again.
struct Parts {
  v1::UpdateHeader header;
  std::vector<std::byte> area;
};

Parts Split(const std::vector<std::byte>& body) {
  uint32_t hlen;
  std::memcpy(&hlen, body.data() + 4, 4);
  Parts p;
  EXPECT_TRUE(p.header.ParseFromArray(body.data() + 8, static_cast<int>(hlen)));
  p.area.assign(body.begin() + static_cast<std::ptrdiff_t>(TensorAreaOffset(hlen)), body.end());
  return p;
}

std::vector<std::byte> Frame(const v1::UpdateHeader& h, const std::vector<std::byte>& area) {
  const std::string text = h.SerializeAsString();
  std::vector<std::byte> body(TensorAreaOffset(text.size()) + area.size(), std::byte{0});
  std::memcpy(body.data(), "SHU1", 4);
  const uint32_t hlen = static_cast<uint32_t>(text.size());
  std::memcpy(body.data() + 4, &hlen, 4);
  std::memcpy(body.data() + 8, text.data(), text.size());
  if (!area.empty()) {
    std::memcpy(body.data() + TensorAreaOffset(text.size()), area.data(), area.size());
  }
  return body;
}

Status Parse(const std::vector<std::byte>& body, const ParseLimits& limits = {}) {
  return ParseUpdate(body, SmallSpec(), limits).status();
}

void ExpectRejected(const std::vector<std::byte>& body, const std::string& message,
                    const ParseLimits& limits = {}) {
  const Status st = Parse(body, limits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.message(), message);
}

TEST(UpdateFormat, RoundTripEveryDtypeBytesCompared) {
  const ModelSpec spec = SmallSpec();
  const Model model = InitModel(spec, 42);
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(d)));
    const std::vector<std::byte> body = EncodeUpdate(Meta(), model, d).value();
    // Layout: magic, u32 header length, header, zero padding to 64, tensors at 64-aligned
    // offsets, body ending at the last tensor.
    ASSERT_EQ(std::memcmp(body.data(), "SHU1", 4), 0);
    uint32_t hlen;
    std::memcpy(&hlen, body.data() + 4, 4);
    const uint64_t area = TensorAreaOffset(hlen);
    EXPECT_EQ(area % 64, 0u);
    for (uint64_t i = 8 + hlen; i < area; ++i) EXPECT_EQ(body[i], std::byte{0});
    uint64_t expected_area = 0;
    for (size_t i = 0; i < spec.size(); ++i) {
      expected_area = AlignUp(expected_area, 64) + spec.tensor(i).numel() * DTypeSize(d);
    }
    EXPECT_EQ(body.size(), area + expected_area);

    Result<UpdateView> view = ParseUpdate(body, spec);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->meta.job, "fmnist");
    EXPECT_EQ(view->meta.client_id, "c7");
    EXPECT_EQ(view->meta.token, "secret");
    EXPECT_EQ(view->meta.base_version, 12u);
    EXPECT_EQ(view->meta.num_samples, 600u);
    EXPECT_EQ(view->meta.local_steps, 50u);
    EXPECT_EQ(view->meta.train_seconds, 1.25);
    EXPECT_EQ(view->meta.kind, UpdateKind::kWeights);
    EXPECT_EQ(view->tensor_area_offset, area);
    ASSERT_EQ(view->tensors.size(), spec.size());
    for (size_t i = 0; i < spec.size(); ++i) {
      const TensorView& t = view->tensors[i];
      EXPECT_EQ(t.index, i);
      EXPECT_EQ(t.name, spec.tensor(i).name);
      EXPECT_EQ(t.dtype, d);
      EXPECT_TRUE(std::equal(t.shape.begin(), t.shape.end(), spec.tensor(i).shape.begin(),
                             spec.tensor(i).shape.end()));
      EXPECT_EQ(t.numel, spec.tensor(i).numel());
      EXPECT_EQ((t.data - body.data() - static_cast<std::ptrdiff_t>(area)) % 64, 0);
      // In place: the view points into the body.
      EXPECT_GE(t.data, body.data());
      EXPECT_LE(t.data + t.length, body.data() + body.size());
      std::vector<std::byte> expected(t.numel * DTypeSize(d));
      EncodeFloats(model.tensor(i).data(), t.numel, d, expected.data());
      ASSERT_EQ(t.length, expected.size());
      EXPECT_EQ(std::memcmp(t.data, expected.data(), expected.size()), 0);
      std::vector<float> back(t.numel);
      DecodeFloats(t.data, d, t.numel, back.data());
      const float tol = d == DType::kF32 ? 0.0f : d == DType::kBF16 ? 1.0f / 128 : 1.0f / 1024;
      for (size_t k = 0; k < back.size(); ++k) {
        EXPECT_NEAR(back[k], model.tensor(i)[k], std::fabs(model.tensor(i)[k]) * tol);
      }
    }
  }
}

TEST(UpdateFormat, MaskedInputIsU32TensorsInSpecOrder) {
  const ModelSpec spec = SmallSpec();
  std::vector<uint32_t> masked(spec.num_params());
  for (size_t i = 0; i < masked.size(); ++i) masked[i] = 0x9e3779b9u * static_cast<uint32_t>(i);
  const std::vector<std::byte> body = EncodeMaskedUpdate(Meta(), spec, masked).value();
  ParseLimits limits;
  limits.allowed_dtypes = {DType::kU32};
  Result<UpdateView> view = ParseUpdate(body, spec, limits);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->meta.client_id, "c7");
  ASSERT_EQ(view->tensors.size(), spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    const TensorView& t = view->tensors[i];
    EXPECT_EQ(t.dtype, DType::kU32);
    ASSERT_EQ(t.length, spec.tensor(i).numel() * 4);
    EXPECT_EQ(std::memcmp(t.data, masked.data() + spec.offset(i), t.length), 0) << i;
  }
  masked.pop_back();
  EXPECT_EQ(EncodeMaskedUpdate(Meta(), spec, masked).status().message(),
            "masked input has " + std::to_string(spec.num_params() - 1) +
                " values, the model has " + std::to_string(spec.num_params()));
}

TEST(UpdateFormat, TensorsInAnyOrderAndDeltaKind) {
  const ModelSpec spec = SmallSpec();
  const Model model = InitModel(spec, 3);
  std::vector<NamedTensor> reversed;
  for (size_t i = spec.size(); i-- > 0;) {
    reversed.push_back({spec.tensor(i).name, spec.tensor(i).shape, model.tensor(i)});
  }
  UpdateMeta meta = Meta();
  meta.kind = UpdateKind::kDelta;
  const std::vector<std::byte> body = EncodeUpdate(meta, reversed, DType::kBF16).value();
  Result<UpdateView> view = ParseUpdate(body, spec);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->meta.kind, UpdateKind::kDelta);
  // Views come back in model order whatever the wire order.
  EXPECT_EQ(view->tensors[0].name, "fc1.weight");
  EXPECT_GT(view->tensors[0].data, view->tensors[3].data);
}

TEST(UpdateFormat, EncodeRejectsValuesNotMatchingShape) {
  const std::vector<uint64_t> shape = {2, 3};
  const std::vector<float> values(5, 0.0f);
  const NamedTensor t{"w", shape, values};
  Result<std::vector<std::byte>> r = EncodeUpdate(Meta(), std::span(&t, 1), DType::kF32);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tensor 'w': shape [2,3] has 6 elements, 5 values given");
}

TEST(UpdateFormat, RejectsBadPrefix) {
  std::vector<std::byte> body = ValidBody();
  ExpectRejected({body.begin(), body.begin() + 5},
                 "update body truncated: 5 bytes, shorter than the 8-byte prefix");
  std::vector<std::byte> bad = body;
  bad[3] = std::byte{'2'};
  ExpectRejected(bad, "bad magic: an update body starts with \"SHU1\"");
  bad = body;
  const uint32_t huge = static_cast<uint32_t>(body.size());
  std::memcpy(bad.data() + 4, &huge, 4);
  ExpectRejected(bad, "header length " + std::to_string(huge) + " runs past the end of the body (" +
                          std::to_string(body.size()) + " bytes)");
  ParseLimits small;
  small.max_header_bytes = 16;
  uint32_t hlen;
  std::memcpy(&hlen, body.data() + 4, 4);
  ExpectRejected(body, "header length " + std::to_string(hlen) + " exceeds the limit 16", small);
}

TEST(UpdateFormat, RejectsHeaderThatDoesNotParse) {
  std::vector<std::byte> body = ValidBody();
  body[8] = std::byte{0xff};  // field 31, wire type 7: invalid
  ExpectRejected(body, "header does not parse as a shoal.v1.UpdateHeader");
}

TEST(UpdateFormat, RejectsOversizeBodyOverTheLimitAsTooLarge) {
  const std::vector<std::byte> body = ValidBody();
  ParseLimits limits;
  limits.max_body_bytes = body.size() - 1;
  const Status st = Parse(body, limits);
  EXPECT_EQ(st.code(), StatusCode::kTooLarge);
  EXPECT_EQ(st.message(), "update body is " + std::to_string(body.size()) +
                              " bytes, the limit is " + std::to_string(body.size() - 1));
}

TEST(UpdateFormat, RejectsTruncatedAndTrailingBytes) {
  const std::vector<std::byte> body = ValidBody();
  Parts p = Split(body);
  // fc2.bias: offset 192, 8 bytes; tensor area is 200 bytes.
  ASSERT_EQ(p.area.size(), 200u);
  ExpectRejected({body.begin(), body.end() - 1},
                 "tensor 'fc2.bias': offset 192 + length 8 runs past the end of the tensor area "
                 "(199 bytes): body truncated");
  std::vector<std::byte> longer = body;
  longer.resize(body.size() + 3);
  ExpectRejected(longer, "update body oversize: 3 bytes after the last tensor");
  // Cut inside the header padding.
  uint32_t hlen;
  std::memcpy(&hlen, body.data() + 4, 4);
  ExpectRejected({body.begin(), body.begin() + 8 + hlen},
                 "update body truncated: " + std::to_string(8 + hlen) +
                     " bytes, the tensor area starts at " + std::to_string(TensorAreaOffset(hlen)));
}

TEST(UpdateFormat, RejectsBadMetadata) {
  Parts p = Split(ValidBody());
  p.header.set_num_samples(0);
  ExpectRejected(Frame(p.header, p.area), "num_samples must be > 0");
  p = Split(ValidBody());
  p.header.set_train_seconds(std::numeric_limits<double>::quiet_NaN());
  ExpectRejected(Frame(p.header, p.area), "train_seconds must be finite and >= 0");
  p = Split(ValidBody());
  p.header.set_train_seconds(-1);
  ExpectRejected(Frame(p.header, p.area), "train_seconds must be finite and >= 0");
  p = Split(ValidBody());
  p.header.set_kind(static_cast<v1::UpdateKind>(9));
  ExpectRejected(Frame(p.header, p.area), "kind 9 unknown");
}

TEST(UpdateFormat, RejectsTensorTableNotMatchingTheModel) {
  Parts p = Split(ValidBody());
  p.header.mutable_tensors(1)->set_name("fc1.b");
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc1.b': not in the model");

  // Names in messages are printable ASCII, whatever the client sent.
  p = Split(ValidBody());
  p.header.mutable_tensors(0)->set_name(std::string("fc\xff\n", 4) + std::string(70, 'x'));
  ExpectRejected(Frame(p.header, p.area),
                 "tensor 'fc\\xff\\x0a" + std::string(60, 'x') + "...': not in the model");

  p = Split(ValidBody());
  p.header.mutable_tensors()->RemoveLast();
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc2.bias': missing");

  p = Split(ValidBody());
  *p.header.add_tensors() = p.header.tensors(0);
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc1.weight': appears twice in the tensor table");

  p = Split(ValidBody());
  p.header.mutable_tensors(0)->clear_shape();
  p.header.mutable_tensors(0)->add_shape(3);
  p.header.mutable_tensors(0)->add_shape(4);
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc1.weight': shape [4,3] expected, got [3,4]");

  p = Split(ValidBody());
  p.header.mutable_tensors(1)->add_shape(1);
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc1.bias': shape [4] expected, got [4,1]");

  p = Split(ValidBody());
  for (int i = 0; i < 1000; ++i) p.header.mutable_tensors(1)->add_shape(7);
  ExpectRejected(Frame(p.header, p.area),
                 "tensor 'fc1.bias': shape [4] expected, got [4,7,7,7,7,7,7,7,...]");

  p = Split(ValidBody());
  p.header.mutable_tensors(2)->set_dtype(static_cast<v1::DType>(7));
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc2.weight': dtype 7 unknown");

  ParseLimits f32_only;
  f32_only.allowed_dtypes = {DType::kF32};
  ExpectRejected(ValidBody(DType::kF16), "tensor 'fc1.weight': dtype F16 not allowed", f32_only);

  // U32 (secure aggregation's masked inputs) only where the caller allows it: the default
  // limits refuse it.
  p = Split(ValidBody());
  p.header.mutable_tensors(2)->set_dtype(v1::U32);
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc2.weight': dtype U32 not allowed");
}

// Block-quantized tensors (Q8, Q4; shoal/common/dtype.h): their lengths, values within half a
// step of what was encoded, and the refusals of a wrong length, a bad scale and a truncated body.
TEST(UpdateFormat, QuantizedTensorsAndTheirRefusals) {
  const Model model = InitModel(SmallSpec(), 3);
  for (DType d : {DType::kQ8, DType::kQ4}) {
    SCOPED_TRACE(std::string(DTypeName(d)));
    const std::vector<std::byte> body = ValidBody(d, 3);
    auto view = ParseUpdate(body, SmallSpec());
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->tensors[0].length, d == DType::kQ8 ? 16u : 10u);  // 12 values, one block
    for (const TensorView& t : view->tensors) {
      EXPECT_EQ(t.dtype, d);
      std::vector<float> x(t.numel);
      DecodeFloats(t.data, d, t.numel, x.data());
      float scale;
      std::memcpy(&scale, t.data, 4);
      for (size_t i = 0; i < t.numel; ++i) {
        EXPECT_LE(std::fabs(x[i] - model.tensor(t.index)[i]), scale * 0.5001f);
      }
    }
    const std::string name(DTypeName(d));
    Parts p = Split(body);
    p.header.mutable_tensors(0)->set_length(p.header.tensors(0).length() - 1);
    ExpectRejected(Frame(p.header, p.area), "tensor 'fc1.weight': length " +
                                                std::to_string(d == DType::kQ8 ? 15 : 9) +
                                                " bytes, shape [4,3] in " + name + " needs " +
                                                std::to_string(d == DType::kQ8 ? 16 : 10));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -1.0f, 3e38f}) {
      p = Split(body);
      std::memcpy(p.area.data() + p.header.tensors(2).offset(), &bad, 4);
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", static_cast<double>(bad));
      ExpectRejected(Frame(p.header, p.area), "tensor 'fc2.weight': 1 of 1 " + name +
                                                  " block scales invalid (first: block 0, scale " +
                                                  shown +
                                                  "); a scale is finite, >= +0 and <= FLT_MAX/128");
      ParseLimits unchecked;
      unchecked.check_finite = false;
      EXPECT_TRUE(Parse(Frame(p.header, p.area), unchecked).ok());
    }
    std::vector<std::byte> truncated(body.begin(), body.end() - 1);
    const Status st = Parse(truncated);
    EXPECT_NE(st.message().find("runs past the end of the tensor area"), std::string::npos)
        << st.message();
    ParseLimits floats_only;
    floats_only.allowed_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
    floats_only.allowed_by = " (spec.aggregation.wireFormats: f32, bf16, f16)";
    ExpectRejected(body,
                   "tensor 'fc1.weight': dtype " + name +
                       " not allowed (spec.aggregation.wireFormats: f32, bf16, f16)",
                   floats_only);
  }
  EXPECT_EQ(UpdateDTypeFromName("INT8"), DType::kQ8);
  EXPECT_EQ(UpdateDTypeFromName("int4"), DType::kQ4);
  EXPECT_EQ(UpdateDTypeFromName("bf16"), DType::kBF16);
  EXPECT_EQ(UpdateDTypeFromName("q8"), std::nullopt);
  EXPECT_EQ(DTypeFromName("Q8"), std::nullopt);  // not a model file's type
}

TEST(UpdateFormat, RejectsBadOffsetsAndLengths) {
  Parts p = Split(ValidBody());
  p.header.mutable_tensors(1)->set_length(12);
  ExpectRejected(Frame(p.header, p.area),
                 "tensor 'fc1.bias': length 12 bytes, shape [4] in F32 needs 16");

  p = Split(ValidBody(DType::kBF16));
  p.header.mutable_tensors(0)->set_length(48);
  ExpectRejected(Frame(p.header, p.area),
                 "tensor 'fc1.weight': length 48 bytes, shape [4,3] in BF16 needs 24");

  p = Split(ValidBody());
  p.header.mutable_tensors(1)->set_offset(65);
  ExpectRejected(Frame(p.header, p.area), "tensor 'fc1.bias': offset 65 is not a multiple of 64");

  p = Split(ValidBody());
  p.header.mutable_tensors(3)->set_offset(1ull << 63);
  ExpectRejected(Frame(p.header, p.area),
                 "tensor 'fc2.bias': offset 9223372036854775808 + length 8 runs past the end of "
                 "the tensor area (200 bytes): body truncated");

  p = Split(ValidBody());
  p.header.mutable_tensors(3)->set_offset(std::numeric_limits<uint64_t>::max() - 63);
  EXPECT_EQ(Parse(Frame(p.header, p.area)).code(), StatusCode::kInvalidArgument);

  // fc1.weight [0,48) and fc2.weight moved onto it: [0,32).
  p = Split(ValidBody());
  p.header.mutable_tensors(2)->set_offset(0);
  ExpectRejected(Frame(p.header, p.area),
                 "tensor 'fc2.weight': bytes [0,32) overlap tensor 'fc1.weight' [0,48)");
}

TEST(UpdateFormat, RejectsNonFiniteValuesNamingTheTensor) {
  const ModelSpec spec = SmallSpec();
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    Model model = InitModel(spec, 5);
    std::span<float> w = model.tensor(2);  // fc2.weight, 8 values
    w[7] = std::numeric_limits<float>::quiet_NaN();
    w[3] = std::numeric_limits<float>::infinity();
    w[5] = -std::numeric_limits<float>::infinity();
    const std::vector<std::byte> body = EncodeUpdate(Meta(), model, d).value();
    ExpectRejected(body, "tensor 'fc2.weight': 3 non-finite values (first at index 3)");
    ParseLimits no_scan;
    no_scan.check_finite = false;
    EXPECT_TRUE(ParseUpdate(body, spec, no_scan).ok());
  }
  // float32 values beyond float16's range become infinite on the wire: rejected too.
  Model model = InitModel(spec, 5);
  model.tensor(3)[1] = 1e6f;
  ExpectRejected(EncodeUpdate(Meta(), model, DType::kF16).value(),
                 "tensor 'fc2.bias': 1 non-finite values (first at index 1)");
}

// Random mutations of a valid body never crash, never make a view point outside the body, and
// either parse or give kInvalidArgument.
TEST(UpdateFormat, SurvivesTenThousandRandomMutations) {
  const ModelSpec spec = SmallSpec();
  const std::vector<std::byte> valid = ValidBody(DType::kBF16, 9);
  std::mt19937_64 rng(20240601);
  int parsed = 0;
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<std::byte> body = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 6) {
        case 0:  // flip bits anywhere
          if (!body.empty()) body[rng() % body.size()] ^= std::byte(1u << (rng() % 8));
          break;
        case 1:  // random byte in the prefix and header, where structure lives
          if (!body.empty()) body[rng() % std::min<size_t>(body.size(), 96)] = std::byte(rng());
          break;
        case 2:  // truncate
          body.resize(rng() % (body.size() + 1));
          break;
        case 3:  // extend with random bytes
          for (uint64_t n = rng() % 130; n > 0; --n) body.push_back(std::byte(rng()));
          break;
        case 4:  // a random header length
          if (body.size() >= 8) {
            const uint32_t v = static_cast<uint32_t>(rng() % 512);
            std::memcpy(body.data() + 4, &v, 4);
          }
          break;
        case 5: {  // a structurally valid header with one field changed
          Parts p = Split(valid);
          v1::TensorEntry* t = p.header.mutable_tensors(static_cast<int>(rng() % 4));
          switch (rng() % 4) {
            case 0:
              t->set_offset(rng() % 4 == 0 ? rng() : rng() % 256);
              break;
            case 1:
              t->set_length(rng() % 4 == 0 ? rng() : rng() % 64);
              break;
            case 2:
              t->add_shape(rng() % 5);
              break;
            case 3:
              t->set_dtype(static_cast<v1::DType>(rng() % 4));
              break;
          }
          body = Frame(p.header, p.area);
          break;
        }
      }
    }
    Result<UpdateView> r = ParseUpdate(body, spec);
    if (r.ok()) {
      ++parsed;
      uint64_t sum = 0;
      for (const TensorView& t : r->tensors) {
        ASSERT_GE(t.data, body.data());
        ASSERT_LE(t.data + t.length, body.data() + body.size());
        for (uint64_t k = 0; k < t.length; ++k) sum += static_cast<uint8_t>(t.data[k]);
      }
      EXPECT_GE(sum, 0u);
    } else {
      ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  // Some mutations (bit flips inside tensor values that stay finite) still parse.
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace shoal::model
