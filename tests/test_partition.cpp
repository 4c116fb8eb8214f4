// Partitioning the training windows across federation groups, on a real two-source corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "corpus_fixture.h"
#include "data/partition.h"
#include "data/window_sampler.h"
#include "util/error.h"

using namespace fedshard;
namespace fs = std::filesystem;

class PartitionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("fedshard-partition-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    data_ = std::make_unique<data::TokenDataset>(fixture::license_corpus(root_), "train", 32, 258);
  }
  static void TearDownTestSuite() {
    data_.reset();
    fs::remove_all(root_);
  }
  static inline fs::path root_;
  static inline std::unique_ptr<data::TokenDataset> data_;
};

TEST_F(PartitionTest, BySourceGivesEachGroupOnlyItsSources) {
  const auto& sources = data_->manifest().sources;
  ASSERT_EQ(sources.size(), 2u);
  const auto p = data::partition_windows(*data_, "by-source", std::vector<int>(2, 2), 0);
  ASSERT_FALSE(p.global_stream);
  std::set<int64_t> seen;
  for (int g = 0; g < 2; ++g) {
    ASSERT_FALSE(p.pools[g].empty());
    for (int64_t w : p.pools[g]) {
      EXPECT_EQ(data_->source_of(w), g) << "group " << g << " got a window of " << sources[data_->source_of(w)];
      EXPECT_TRUE(seen.insert(w).second);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), data_->num_windows());
  EXPECT_THROW(data::partition_windows(*data_, "by-source", std::vector<int>(3, 2), 0), Error);  // 3 groups, 2 sources
}

TEST_F(PartitionTest, DirichletCoversEveryWindowOnceAndIsSeeded) {
  const auto a = data::partition_windows(*data_, "dirichlet:0.5", std::vector<int>(4, 2), 7);
  const auto b = data::partition_windows(*data_, "dirichlet:0.5", std::vector<int>(4, 2), 7);
  const auto c = data::partition_windows(*data_, "dirichlet:0.5", std::vector<int>(4, 2), 8);
  EXPECT_EQ(a.pools, b.pools);
  EXPECT_NE(a.pools, c.pools);
  std::set<int64_t> seen;
  for (const auto& pool : a.pools)
    for (int64_t w : pool) EXPECT_TRUE(seen.insert(w).second);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), data_->num_windows());
  // A large ALPHA approaches equal shares.
  const auto even = data::partition_windows(*data_, "dirichlet:1000", std::vector<int>(2, 2), 1);
  const double share = double(even.pools[0].size()) / double(data_->num_windows());
  EXPECT_NEAR(share, 0.5, 0.05);
  // Unequal groups get data in proportion to their ranks: 3 of 4 for a group of 3 ranks next to one of 1.
  const auto uneven = data::partition_windows(*data_, "dirichlet:1000", {3, 1}, 1);
  EXPECT_NEAR(double(uneven.pools[0].size()) / double(data_->num_windows()), 0.75, 0.05);
  // Dir(alpha) draws sum to one and average 1/n.
  double mean0 = 0;
  for (uint64_t s = 0; s < 400; ++s) {
    const auto q = data::dirichlet(0.3, 4, s);
    double sum = 0;
    for (double x : q) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-12);
    mean0 += q[0] / 400;
  }
  EXPECT_NEAR(mean0, 0.25, 0.05);
}

TEST_F(PartitionTest, IidIsOneSeededStreamAndOneGroupIsAlwaysIid) {
  EXPECT_TRUE(data::partition_windows(*data_, "iid", std::vector<int>(4, 2), 0).global_stream);
  EXPECT_TRUE(data::partition_windows(*data_, "by-source", std::vector<int>(1, 2), 0).global_stream);
  std::vector<int64_t> pool(data_->num_windows());
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int64_t>(i);
  data::WindowSampler s1(pool, 4, 3, /*seed=*/11, 0), s2(pool, 4, 3, 11, 0), s3(pool, 4, 3, 12, 0);
  EXPECT_EQ(s1.windows(5, 2), s2.windows(5, 2));
  EXPECT_NE(s1.windows(5, 2), s3.windows(5, 2));
  EXPECT_THROW(data::partition_windows(*data_, "shuffled", std::vector<int>(2, 2), 0), Error);
  EXPECT_THROW(data::partition_windows(*data_, "dirichlet:abc", std::vector<int>(2, 2), 0), Error);
  EXPECT_THROW(data::partition_windows(*data_, "dirichlet:-1", std::vector<int>(2, 2), 0), Error);
}
