// CheckpointWriter on a real directory: queue order, superseded items, callbacks in order,
// Wait/Flush, the delay, and a destructor that writes what is queued.
#include "shoal/fl/coordinator/checkpoint_writer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace shoal {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class CheckpointWriterTest : public ::testing::Test {
 protected:
  CheckpointWriter::Item Item(const std::string& job, uint64_t v, bool model) {
    CheckpointWriter::Item it;
    it.job = job;
    it.dir = root_ + "/" + job;
    it.version = v;
    if (model) it.model = std::make_shared<const std::string>("model-" + std::to_string(v));
    it.state = "{\"version\":" + std::to_string(v) + "}";
    it.on_durable = [this, job, v] {
      std::lock_guard lock(mu_);
      durable_.push_back(job + "@" + std::to_string(v));
      // The files are on disk when the callback runs.
      states_.push_back(Read(root_ + "/" + job + "/state.json"));
    };
    return it;
  }
  shoal::testing::TempDir tmp_{"shoal-ckpt"};
  const std::string root_ = tmp_.path();
  std::mutex mu_;
  std::vector<std::string> durable_, states_;
};

TEST_F(CheckpointWriterTest, WritesModelThenStateAndCallsBackAfter) {
  CheckpointWriter w;
  const uint64_t t = w.Enqueue(Item("a", 1, true));
  w.Wait(t);
  EXPECT_EQ(Read(root_ + "/a/model.1.safetensors"), "model-1");
  EXPECT_EQ(Read(root_ + "/a/state.json"), "{\"version\":1}");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a/optimizer.1.bin"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a/state.json.tmp"));
  std::lock_guard lock(mu_);
  EXPECT_EQ(durable_, (std::vector<std::string>{"a@1"}));
  EXPECT_EQ(states_, (std::vector<std::string>{"{\"version\":1}"}));
  EXPECT_EQ(w.written(), 1u);
}

// Held back by the delay, three versions of one job and a state-only item of another queue
// up: the newest model of `a` is written once, the older ones are superseded, and every
// callback still runs, in queue order, after the files that cover it.
TEST_F(CheckpointWriterTest, ANewerModelSupersedesQueuedOnesAndCallbacksKeepTheirOrder) {
  CheckpointWriter w(std::chrono::milliseconds(200));
  w.Enqueue(Item("a", 1, true));
  w.Enqueue(Item("b", 7, false));
  w.Enqueue(Item("a", 2, true));
  auto state_only = Item("a", 2, false);
  state_only.state = "{\"version\":2,\"clients\":1}";
  w.Enqueue(std::move(state_only));
  w.Enqueue(Item("a", 3, true));
  w.Flush();
  EXPECT_EQ(Read(root_ + "/a/model.3.safetensors"), "model-3");
  // Only version 3's files are left (1 and 2 were superseded before being written).
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a/model.1.safetensors"));
  EXPECT_EQ(Read(root_ + "/a/state.json"), "{\"version\":3}");
  EXPECT_EQ(Read(root_ + "/b/state.json"), "{\"version\":7}");
  std::lock_guard lock(mu_);
  EXPECT_EQ(durable_, (std::vector<std::string>{"b@7", "a@1", "a@2", "a@2", "a@3"}));
  // a@1, a@2 and the state-only item ran when version 3's files were on disk.
  EXPECT_EQ(states_[1], "{\"version\":3}");
  EXPECT_EQ(w.written(), 2u);
  EXPECT_EQ(w.superseded(), 3u);
}

// Each version's files are named by it; once state.json names the new version, the files of
// the older ones go (and a crash before that leaves the version the old state names intact).
TEST_F(CheckpointWriterTest, OlderVersionsFilesGoOnceTheStateNamesTheNewOne) {
  CheckpointWriter w;
  auto one = Item("a", 1, true);
  one.optimizer = std::make_shared<const std::vector<uint8_t>>(std::vector<uint8_t>{1, 2});
  w.Wait(w.Enqueue(std::move(one)));
  EXPECT_EQ(Read(root_ + "/a/optimizer.1.bin"), std::string("\x01\x02", 2));
  std::ofstream(root_ + "/a/model.safetensors") << "legacy";
  w.Wait(w.Enqueue(Item("a", 2, true)));
  EXPECT_EQ(Read(root_ + "/a/model.2.safetensors"), "model-2");
  EXPECT_EQ(Read(root_ + "/a/state.json"), "{\"version\":2}");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a/model.1.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a/optimizer.1.bin"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a/model.safetensors"));
}

// A model item is never superseded by a later state-only one (the state names its version).
TEST_F(CheckpointWriterTest, AStateOnlyItemDoesNotSupersedeAModel) {
  CheckpointWriter w(std::chrono::milliseconds(100));
  w.Enqueue(Item("a", 4, true));
  w.Enqueue(Item("a", 4, false));
  w.Flush();
  EXPECT_EQ(Read(root_ + "/a/model.4.safetensors"), "model-4");
  EXPECT_EQ(w.written(), 2u);
  EXPECT_EQ(w.superseded(), 0u);
}

TEST_F(CheckpointWriterTest, TheDelayHoldsTheWriteAndTheDestructorWritesWhatIsQueued) {
  {
    CheckpointWriter w(std::chrono::milliseconds(60000));
    w.Enqueue(Item("a", 1, true));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(std::filesystem::exists(root_ + "/a/state.json"));
  }
  EXPECT_EQ(Read(root_ + "/a/state.json"), "{\"version\":1}");
  std::lock_guard lock(mu_);
  EXPECT_EQ(durable_, (std::vector<std::string>{"a@1"}));
}

TEST_F(CheckpointWriterTest, AnUnwritableDirectoryIsReportedNotFatal) {
  std::ofstream(root_ + "/file") << "x";
  auto it = Item("file/sub", 1, true);  // a directory below a regular file
  CheckpointWriter w;
  w.Wait(w.Enqueue(std::move(it)));
  EXPECT_FALSE(WriteFileAtomic(root_ + "/file/sub/x", "y", 1).ok());
  EXPECT_EQ(WriteFileAtomic(root_ + "/file/sub/x", "y", 1).message().find("cannot write " + root_),
            0u);
}

}  // namespace
}  // namespace shoal
