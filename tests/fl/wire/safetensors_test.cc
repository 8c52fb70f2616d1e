#include "shoal/fl/wire/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "shoal/fl/wire/architectures.h"

namespace shoal::model {
namespace {

std::vector<std::byte> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

// A file from a JSON header text and `data_bytes` bytes of data (value i = i).
std::vector<std::byte> Craft(const std::string& json, size_t data_bytes) {
  std::vector<std::byte> f(8 + json.size() + data_bytes);
  const uint64_t n = json.size();
  std::memcpy(f.data(), &n, 8);
  std::memcpy(f.data() + 8, json.data(), json.size());
  for (size_t i = 0; i < data_bytes; ++i) f[8 + json.size() + i] = std::byte(i);
  return f;
}

std::string ErrorOf(const std::vector<std::byte>& f) {
  Result<SafetensorsView> r = ReadSafetensors(f);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(Safetensors, ModelRoundTripWithMetadata) {
  const Model model = InitModel(MlpSpec(), 11);
  const std::vector<std::byte> file = ModelToSafetensors(
      model, {{std::string(kMetadataJob), "fmnist"}, {std::string(kMetadataVersion), "42"}});
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // data 8-byte aligned
  EXPECT_EQ(file.size(), 8 + n + 101770 * 4);

  Result<SafetensorsView> view = ReadSafetensors(file);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->metadata.at("shoal.job"), "fmnist");
  EXPECT_EQ(view->metadata.at("shoal.version"), "42");
  EXPECT_EQ(view->metadata.at("format"), "pt");
  ASSERT_EQ(view->tensors.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const SafetensorsTensor& t = view->tensors[i];
    EXPECT_EQ(t.name, model.spec.tensor(i).name);
    EXPECT_EQ(t.dtype, DType::kF32);
    EXPECT_EQ(t.shape, model.spec.tensor(i).shape);
    // Zero copy: the view points into the file, and holds exactly the model's bytes.
    EXPECT_GE(t.data.data(), file.data());
    ASSERT_EQ(t.data.size(), model.tensor(i).size() * 4);
    EXPECT_EQ(std::memcmp(t.data.data(), model.tensor(i).data(), t.data.size()), 0);
  }
  Result<Model> back = ModelFromSafetensors(file, MlpSpec());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->values, model.values);
  Result<Model> inferred = ModelFromSafetensors(file);
  ASSERT_TRUE(inferred.ok());
  EXPECT_EQ(inferred->spec.num_params(), 101770u);
  EXPECT_EQ(inferred->values, model.values);
}

TEST(Safetensors, NarrowDtypesRoundTrip) {
  const Model model = InitModel(MlpSpec(20, {8}, 3), 2);
  for (DType d : {DType::kBF16, DType::kF16}) {
    const std::vector<std::byte> file = ModelToSafetensors(model, {}, d);
    Result<SafetensorsView> view = ReadSafetensors(file);
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(view->tensors[0].dtype, d);
    std::vector<std::byte> expected(model.tensor(0).size() * 2);
    EncodeFloats(model.tensor(0).data(), model.tensor(0).size(), d, expected.data());
    EXPECT_EQ(std::memcmp(view->tensors[0].data.data(), expected.data(), expected.size()), 0);
    Result<Model> back = ModelFromSafetensors(file, model.spec);
    ASSERT_TRUE(back.ok());
    for (size_t i = 0; i < model.values.size(); ++i) {
      EXPECT_NEAR(back->values[i], model.values[i], std::fabs(model.values[i]) / 128);
    }
  }
}

// tests/fl/wire/data/reference.safetensors, written by make_reference.py with numpy.
// The tensor `name` of `view` has `dtype` and `shape`, and its data decodes to `values`.
void ExpectTensor(const SafetensorsView& view, const std::string& name, DType dtype,
                  const std::vector<uint64_t>& shape, const std::vector<float>& values) {
  const SafetensorsTensor* t = view.Find(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->dtype, dtype) << name;
  EXPECT_EQ(t->shape, shape) << name;
  std::vector<float> decoded(values.size());
  DecodeFloats(t->data.data(), t->dtype, decoded.size(), decoded.data());
  EXPECT_EQ(decoded, values) << name;
}

TEST(Safetensors, ReadsReferenceFileWrittenByPython) {
  const std::vector<std::byte> file = ReadFile(SHOAL_MODEL_TEST_DATA "/reference.safetensors");
  ASSERT_FALSE(file.empty());
  Result<SafetensorsView> view = ReadSafetensors(file);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->metadata.size(), 2u);
  EXPECT_EQ(view->metadata.at("shoal.job"), "ref");
  EXPECT_EQ(view->metadata.at("shoal.version"), "7");
  // Data order, whatever the header's key order.
  ASSERT_EQ(view->tensors.size(), 3u);
  EXPECT_EQ(view->tensors[0].name, "c.f16");
  EXPECT_EQ(view->tensors[1].name, "a.weight");
  EXPECT_EQ(view->tensors[2].name, "b.bf16");

  ExpectTensor(*view, "a.weight", DType::kF32, {2, 3}, {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f});
  ExpectTensor(*view, "b.bf16", DType::kBF16, {4}, {1.0f, -2.5f, 3.140625f, 65280.0f});
  ExpectTensor(*view, "c.f16", DType::kF16, {2, 2}, {0.5f, -0.25f, 1024.0f, 6.103515625e-05f});

  // Writing the same tensors with Shoal's writer and reading them back gives the same values.
  std::vector<SafetensorsEntry> entries;
  for (const SafetensorsTensor& t : view->tensors)
    entries.push_back({t.name, t.dtype, t.shape, t.data});
  Result<std::vector<std::byte>> again = WriteSafetensors(entries, view->metadata);
  ASSERT_TRUE(again.ok());
  Result<SafetensorsView> view2 = ReadSafetensors(*again);
  ASSERT_TRUE(view2.ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(view2->tensors[i].name, view->tensors[i].name);
    ASSERT_EQ(view2->tensors[i].data.size(), view->tensors[i].data.size());
    EXPECT_EQ(std::memcmp(view2->tensors[i].data.data(), view->tensors[i].data.data(),
                          view->tensors[i].data.size()),
              0);
  }
}

TEST(Safetensors, RejectsMalformedFilesNamingTheProblem) {
  EXPECT_EQ(ErrorOf(std::vector<std::byte>(5)),
            "safetensors file truncated: 5 bytes, shorter than the 8-byte header size");
  std::vector<std::byte> f = Craft("{}", 0);
  const uint64_t big = 100;
  std::memcpy(f.data(), &big, 8);
  EXPECT_EQ(ErrorOf(f), "safetensors header size 100 runs past the end of the file (10 bytes)");
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(f.data(), &huge, 8);
  EXPECT_EQ(ErrorOf(f), "safetensors header size 1099511627776 exceeds the limit 104857600");
  EXPECT_EQ(ErrorOf(Craft("{\"a\": ", 0)), "safetensors header is not valid JSON");
  EXPECT_EQ(ErrorOf(Craft("[1]", 0)), "safetensors header is not a JSON object");
  EXPECT_EQ(ErrorOf(Craft(R"({"__metadata__": {"v": 1}})", 0)),
            "__metadata__: value of 'v' is not a string");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8)),
            "tensor 'x': dtype I64 not supported (F32, BF16, F16)");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", 4)),
            "tensor 'x': dtype missing");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
            "tensor 'x': shape holds a value that is not a size");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4)),
            "tensor 'x': data_offsets is not [begin, end]");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
            "tensor 'x': data_offsets [0,8) run past the end of the data (4 bytes)");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [2,3], "data_offsets": [0, 8]}})", 8)),
            "tensor 'x': data_offsets span 8 bytes, shape [2,3] in F32 needs 24");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],
                              "data_offsets": [0, 8]}})",
                          8)),
            "tensor 'x': data_offsets span 8 bytes, shape [4294967296,4294967296,16] in F32 "
            "needs more");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)),
            "tensor 'x': 4 unused bytes before its data");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                              "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                          8)),
            "tensor 'y': data_offsets overlap another tensor");
  EXPECT_EQ(ErrorOf(Craft(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 6)),
            "safetensors data has 2 bytes after the last tensor");
}

TEST(Safetensors, ModelMustMatchTheSpec) {
  const Model model = InitModel(MlpSpec(4, {3}, 2), 1);
  const std::vector<std::byte> file = ModelToSafetensors(model);
  EXPECT_EQ(ModelFromSafetensors(file, MlpSpec(3, {4}, 2)).status().message(),
            "tensor 'fc1.weight': shape [4,3] expected, got [3,4]");
  EXPECT_EQ(ModelFromSafetensors(file, MlpSpec(4, {3, 3}, 2)).status().message(),
            "tensor 'fc2.weight': shape [3,3] expected, got [2,3]");
  EXPECT_EQ(ModelFromSafetensors(file, LogRegSpec(4, 2)).status().message(),
            "tensor 'fc1.weight': not in the model");
}

TEST(Safetensors, WriterRejectsBadEntries) {
  const std::vector<uint64_t> shape = {2};
  const std::vector<std::byte> bytes(8);
  const std::vector<std::byte> short_bytes(6);
  std::vector<SafetensorsEntry> dup = {{"a", DType::kF32, shape, bytes},
                                       {"a", DType::kF32, shape, bytes}};
  EXPECT_EQ(WriteSafetensors(dup).status().message(), "tensor 'a': appears twice");
  std::vector<SafetensorsEntry> bad = {{"a", DType::kF32, shape, short_bytes}};
  EXPECT_EQ(WriteSafetensors(bad).status().message(),
            "tensor 'a': 6 bytes do not hold shape [2] in F32");
  std::vector<SafetensorsEntry> meta = {{"__metadata__", DType::kF32, shape, bytes}};
  EXPECT_EQ(WriteSafetensors(meta).status().message(), "tensor name '__metadata__' is not allowed");
}

// The header alone, then each tensor's bytes copied at the returned offset in order: the bytes
// WriteSafetensorsString writes; a refused entry leaves `out` as it was, with the same message.
TEST(Safetensors, HeaderIntoThenTheTensorsInOrderIsTheWholeFile) {
  const std::vector<uint64_t> s3 = {3}, s2x2 = {2, 2};
  std::vector<std::byte> a(12), b(16);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::byte(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte(200 - i);
  const std::vector<SafetensorsEntry> entries = {{"b.weight", DType::kF32, s2x2, b},
                                                 {"a.bias", DType::kF32, s3, a}};
  const std::map<std::string, std::string> meta = {{"job", "j"}, {"version", "7"}};
  std::string got = "left over";
  Result<std::string> whole = WriteSafetensorsString(entries, meta);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  const std::string& want = *whole;
  Result<size_t> at = WriteSafetensorsHeaderInto(entries, meta, &got);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(*at, want.size() - a.size() - b.size());
  std::memcpy(got.data() + *at, b.data(), b.size());
  std::memcpy(got.data() + *at + b.size(), a.data(), a.size());
  EXPECT_EQ(got, want);
  const std::vector<std::byte> short_bytes(6);
  const std::vector<SafetensorsEntry> bad = {{"a", DType::kF32, s3, short_bytes}};
  std::string kept = "kept";
  Result<size_t> refused = WriteSafetensorsHeaderInto(bad, {}, &kept);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "tensor 'a': 6 bytes do not hold shape [3] in F32");
  EXPECT_EQ(kept, "kept");
}

}  // namespace
}  // namespace shoal::model
