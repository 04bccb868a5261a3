// The Hopper extend's page boxes (src/cuda/prefill_hopper/page_boxes.hpp), on the host: which pools
// fit, and that the boxes of every tile cover exactly the sequence's keys, each inside one page of
// the table, the cut box's rows counted, boxes past the length and corrupt entries absent.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/prefill_hopper/page_boxes.hpp"

namespace attnkit::cuda_prefill_hopper {
namespace {

TEST(HopperPageBoxes, BoxRowsAndWhichPagesFit) {
  EXPECT_EQ(hopper_page_box_rows(16), 16);
  EXPECT_EQ(hopper_page_box_rows(256), 16);
  EXPECT_EQ(hopper_page_box_rows(8), 8);
  EXPECT_EQ(hopper_page_box_rows(24), 8);
  EXPECT_EQ(hopper_page_box_rows(12), 0);
  EXPECT_EQ(hopper_page_box_rows(1), 0);
  EXPECT_TRUE(hopper_pages_fit(16, 128));   // 8 boxes
  EXPECT_TRUE(hopper_pages_fit(8, 128));    // 16 boxes
  EXPECT_TRUE(hopper_pages_fit(16, 80));    // d256's 80-key tiles: 5 boxes
  EXPECT_TRUE(hopper_pages_fit(24, 64));
  EXPECT_FALSE(hopper_pages_fit(8, 264));   // 33 boxes: more than a warp's lanes
  EXPECT_FALSE(hopper_pages_fit(12, 128));
}

TEST(HopperPageBoxes, BoxesCoverEachSequencesKeysInsideTheirPages) {
  std::mt19937 rng(7);
  for (int page_size : {8, 16, 24, 32, 48, 64, 256}) {
    for (int tile : {64, 80, 128}) {
      if (!hopper_pages_fit(page_size, tile)) continue;
      HopperPages pages;
      pages.num_pages = 500;
      pages.box_rows = hopper_page_box_rows(page_size);
      pages.page_size = cuda_common::FastDivider(static_cast<std::uint32_t>(page_size));
      for (int kv_len : {0, 1, 7, 8, 15, 16, 17, tile - 1, tile, tile + 1, 1000, 4093}) {
        const int table_len = (kv_len + page_size - 1) / page_size + 2;
        std::vector<int> table(static_cast<std::size_t>(table_len));
        for (int& e : table) e = static_cast<int>(rng() % 500);
        table[table.size() - 1] = -1;  // past the sequence: never read
        auto page_of = [&](int i) { return table.at(static_cast<std::size_t>(i)); };
        std::vector<int> seen(static_cast<std::size_t>(kv_len), 0);
        for (int key0 = 0; key0 < kv_len + tile; key0 += tile) {
          int cut = 0;
          for (int box = 0; box < tile / pages.box_rows; ++box) {
            const PageBox pb = page_box(pages, key0, box, kv_len, page_of);
            const int first = key0 + box * pages.box_rows;
            if (first >= kv_len) {
              EXPECT_EQ(pb.page, pages.num_pages) << "a box past the length reads the absent page";
              EXPECT_LE(pb.rows, 0);
              continue;
            }
            EXPECT_EQ(pb.rows, std::min(pages.box_rows, kv_len - first));
            cut += pb.rows < pages.box_rows;
            EXPECT_EQ(pb.page, table[static_cast<std::size_t>(first / page_size)]);
            EXPECT_EQ(pb.slot, first % page_size);
            EXPECT_LE(pb.slot + pages.box_rows, page_size) << "a box crosses a page";
            for (int r = 0; r < pb.rows; ++r) ++seen[static_cast<std::size_t>(first + r)];
          }
          EXPECT_LE(cut, 1) << "at most one cut box per tile";
        }
        for (int c : seen) EXPECT_EQ(c, 1) << "page " << page_size << " tile " << tile << " kv_len " << kv_len;
      }
    }
  }
}

TEST(HopperPageBoxes, CorruptTableEntriesReadAsAbsentPages) {
  HopperPages pages;
  pages.num_pages = 10;
  pages.box_rows = 16;
  pages.page_size = cuda_common::FastDivider(16);
  for (int bad : {-1, -7, 10, 1 << 30}) {
    const PageBox pb = page_box(pages, 0, 0, 100, [&](int) { return bad; });
    EXPECT_EQ(pb.page, pages.num_pages) << bad;
    EXPECT_EQ(pb.rows, 0) << bad;  // not cut: never copied by hand
  }
}

}  // namespace
}  // namespace attnkit::cuda_prefill_hopper
