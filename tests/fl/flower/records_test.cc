// Flower's object ids and encodings, byte for byte: the ids below are what flwr 1.42 computes for
// the same records (ArrayRecord({"w": Array(np.arange(6, float32).reshape(2, 3)), "b":
// Array(np.zeros(3, float32))}), ConfigRecord({"lr": 0.05, "server-round": 1}), and the
// RecordDict {"arrays", "config"} of both).
#include "shoal/fl/flower/records.h"

#include <gtest/gtest.h>

#include "shoal/fl/flower/npy.h"
#include "shoal/fl/flower/objects.h"

namespace shoal::flower {
namespace {

model::Model TwoTensors() {
  model::Model m(model::ModelSpec({{"w", {2, 3}, 0}, {"b", {3}, 0}}));
  for (int i = 0; i < 6; ++i) m.values[i] = static_cast<float>(i);
  return m;
}

TEST(FlowerRecords, IdsMatchFlower) {
  ObjectMap objects;
  const BuiltObject ar = BuildArrayRecord(TwoTensors(), objects);
  EXPECT_EQ(ar.id, "6cdaa4a013f825d7ab9e0bff22911ee5808630518eeee9cf3f3e56d21fd29e4f");
  const std::string w = "d0a7925020115f6db7d9c8a4f51c363476703b1239258b9d069a8a949954e97a";
  ASSERT_TRUE(objects.count(w));
  EXPECT_EQ(*objects.at(w),
            std::string("Array 216023e51b2cdead91025b03a1b47a9d124cd44230f0da6476bda0b223d40aed "
                        "86\0{\"dtype\": \"float32\", \"shape\": [2, 3], \"stype\": "
                        "\"numpy.ndarray\", \"arraychunk_ids\": [0]}",
                        160));
  const BuiltObject cr = BuildConfigRecord({{"lr", 0.05}, {"server-round", int64_t{1}}}, objects);
  EXPECT_EQ(cr.id, "e7bc73b548f8d544fce10d75ac426b9de91085156107d82eed15ba892255ae51");
  const BuiltObject rd = BuildRecordDict({{"arrays", ar}, {"config", cr}}, objects);
  EXPECT_EQ(rd.id, "c5d0eeb20499bf316e1daa9c979f40e38ef531777f5df26095f48633c4ac4b69");
  // The tree: RecordDict -> (ArrayRecord -> (Array -> chunk) x2, ConfigRecord).
  ASSERT_EQ(rd.tree.children_size(), 2);
  EXPECT_EQ(rd.tree.children(0).children_size(), 2);
  EXPECT_EQ(rd.tree.children(0).children(0).children_size(), 1);
  // 2 chunks + 2 arrays + ArrayRecord + ConfigRecord + RecordDict.
  EXPECT_EQ(objects.size(), 7u);
}

TEST(FlowerRecords, ReadsAReplyBackAndRefusesWhatIsNotOne) {
  ObjectMap objects;
  const BuiltObject ar = BuildArrayRecord(TwoTensors(), objects);
  const BuiltObject rd = BuildRecordDict({{"arrays", ar}}, objects);
  Metadata md;
  md.set_run_id(42);
  md.set_reply_to_message_id(std::string(64, 'a'));
  const BuiltObject msg = BuildMessage(md, rd, objects);
  EXPECT_EQ(md.message_id(), msg.id);
  auto r = ReadReply(msg.id, objects);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_arrays);
  ASSERT_EQ(r->arrays.size(), 2u);
  EXPECT_EQ(r->arrays.at("w").shape, (std::vector<uint64_t>{2, 3}));
  float v[6];
  std::memcpy(v, r->arrays.at("w").data.data(), sizeof v);
  EXPECT_EQ(v[5], 5.0f);
  // A missing chunk: named.
  ObjectMap broken = objects;
  broken.erase(ar.tree.children(0).children(0).object_id());
  EXPECT_NE(ReadReply(msg.id, broken).status().message().find("object missing"), std::string::npos);
}

TEST(FlowerNpy, RoundTripsAndRefusesOtherDtypes) {
  const uint64_t shape[] = {10};
  const float values[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::string npy = EncodeNpyF32(shape, values);
  EXPECT_EQ(npy.size() % 64, 40u);  // header padded to 64, then 40 bytes of data
  EXPECT_NE(npy.find("'shape': (10,), }"), std::string::npos);
  auto v = ParseNpyF32(npy);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->shape, (std::vector<uint64_t>{10}));
  std::string f8 = npy;
  f8.replace(f8.find("<f4"), 3, "<f8");
  EXPECT_EQ(ParseNpyF32(f8).status().message(),
            "npy: dtype '<f8' (only float32, '<f4', is folded)");
}

TEST(FlowerObjects, HeadIsChecked) {
  EXPECT_FALSE(ParseObject("Array  12").ok());
  EXPECT_EQ(ParseObject(std::string("Array  5\0abc", 12)).status().message(),
            "object: the body length does not match");
  EXPECT_EQ(ParseObject(std::string("Array xyz 3\0abc", 15)).status().message(),
            "object: a child id is not a SHA-256 hex");
  EXPECT_TRUE(ParseObject(std::string("ArrayChunk  3\0abc", 17)).ok());
}

}  // namespace
}  // namespace shoal::flower
