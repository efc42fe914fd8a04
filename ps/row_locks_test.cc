#include "ps/row_locks.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr int64_t kRows = 64;

// Rows of plain counters, guarded only by RowLocks and RowLockBypass as a shard guards its rows:
// lost updates show as a short count.
struct Table {
  RowLocks locks{kRows, /*row_bytes=*/256};  // one lock per row
  RowLockBypass bypass;
  int64_t count[kRows] = {};

  // A slow read-modify-write: two unguarded ones at once would lose one.
  void Increment(int64_t row) {
    const int64_t v = count[row];
    for (volatile int k = 0; k < 20; k = k + 1) {
    }
    count[row] = v + 1;
  }

  // One batch adding `times` to every row, one at a time, cut into `pieces` pieces over distinct
  // rows, run at once on `pool` and the calling thread as a shard runs a large request (or one
  // after another on this thread if `pool` is null).
  void AddToEveryRow(ThreadPool* pool, int pieces, int times) {
    RowLockBypass::Batch batch(&bypass, /*writer=*/true);
    ParallelFor(pool, pieces, [&](int64_t p) {
      RowLockBypass::Piece piece(&batch);
      for (int t = 0; t < times; ++t) {
        for (int64_t row = kRows * p / pieces; row < kRows * (p + 1) / pieces; ++row) {
          piece.Run(&locks, row, /*bytes=*/64, [&] { Increment(row); });
        }
      }
    });
  }
};

// 4 threads of writer batches (each waits its turn behind a bypassing writer, and takes locks while
// a locked writer is registered) and one of whole-scope locked writers. With `pool`, each batch's
// pieces run at once on it and the calling thread; without, one after another.
void RunWriters(ThreadPool* pool) {
  Table table;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        table.AddToEveryRow(pool, /*pieces=*/1 + (i + t) % 4, /*times=*/10);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 2000; ++i) {
      {
        RowLockBypass::Locked registered(&table.bypass, /*writer=*/true);
        for (int64_t row = 0; row < kRows; ++row) {
          RowLockGuard lock(&table.locks, row);
          table.Increment(row);
        }
      }
      std::this_thread::yield();  // leaves gaps in which a batch can bypass
    }
  });
  for (std::thread& t : threads) t.join();
  for (int64_t row = 0; row < kRows; ++row) {
    EXPECT_EQ(table.count[row], 4 * 2000 * 10 + 2000) << row;
  }
}

TEST(RowLockBypassTest, WritersFromManyThreads_NoLostUpdates) { RunWriters(nullptr); }

TEST(RowLockBypassTest, WritersWithPiecesOnAPool_NoLostUpdates) {
  ThreadPool pool(3);
  RunWriters(&pool);
}

// A reader never sees a row half written, whether it or the writer bypasses the locks.
TEST(RowLockBypassTest, ReadersNeverSeeHalfWrittenRows) {
  constexpr int kWidth = 8;
  RowLocks locks(kRows, /*row_bytes=*/256);
  RowLockBypass bypass;
  // Relaxed atomics: a torn row is then a visible mismatch, not undefined behaviour.
  std::vector<std::atomic<int64_t>> cells(kRows * kWidth);
  for (auto& c : cells) c.store(0, std::memory_order_relaxed);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> torn{0}, reads{0};

  auto run = [&](bool writer, int64_t value) {
    RowLockBypass::Batch batch(&bypass, writer);
    RowLockBypass::Piece piece(&batch);
    for (int64_t row = 0; row < kRows; ++row) {
      auto work = [&] {
        if (writer) {
          for (int k = 0; k < kWidth; ++k) {
            cells[row * kWidth + k].store(value, std::memory_order_relaxed);
          }
        } else {
          const int64_t first = cells[row * kWidth].load(std::memory_order_relaxed);
          for (int k = 1; k < kWidth; ++k) {
            if (cells[row * kWidth + k].load(std::memory_order_relaxed) != first) ++torn;
          }
          ++reads;
        }
      };
      piece.Run(&locks, row, /*bytes=*/kWidth * 8, work);
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int64_t i = 1; i <= 20000; ++i) run(/*writer=*/true, i * 2 + w);
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      while (!stop.load()) run(/*writer=*/false, 0);
    });
  }
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(torn.load(), 0);
}

// A bypassing batch that runs on and on lets a conflicting operation in within kCheckBytes bytes:
// the operation registers, the batch's piece sees it and switches to the locks.
TEST(RowLockBypassTest, LongBatch_ConflictingOperationGetsInWhileItRuns) {
  RowLockBypass bypass;
  std::atomic<bool> reader_in{false};
  RowLockBypass::Batch batch(&bypass, /*writer=*/true);
  RowLockBypass::Piece piece(&batch);
  ASSERT_TRUE(piece.Bypassing(64));
  std::thread reader([&] {
    RowLockBypass::Locked registered(&bypass, /*writer=*/false);
    reader_in = true;
  });
  // Spins until the reader has registered, then switches within kCheckBytes (bounded, so a
  // broken bypass fails here instead of hanging).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int64_t i = 1; piece.Bypassing(64); ++i) {
    if (i % (1 << 20) == 0 && std::chrono::steady_clock::now() > give_up) break;
  }
  EXPECT_FALSE(piece.Bypassing(64));
  reader.join();  // the reader got in while the batch still runs
  EXPECT_TRUE(reader_in.load());
  // A piece that starts after the bypass ended is an ordinary locked operation.
  RowLockBypass::Piece late(&batch);
  EXPECT_FALSE(late.Bypassing(64));
}

TEST(RowLockBypassTest, ReadersShareTheBypass) {
  RowLockBypass bypass;
  {
    RowLockBypass::Batch reading(&bypass, /*writer=*/false);
    RowLockBypass::Piece piece(&reading);
    EXPECT_TRUE(piece.Bypassing(64));
    // A second reader bypasses too, and does not stop the first.
    RowLockBypass::Batch second(&bypass, /*writer=*/false);
    RowLockBypass::Piece second_piece(&second);
    EXPECT_TRUE(second_piece.Bypassing(64));
    for (int64_t i = 0; i < 2 * RowLockBypass::kCheckBytes / 64; ++i) {
      EXPECT_TRUE(piece.Bypassing(64));
      EXPECT_TRUE(second_piece.Bypassing(64));
    }
  }
  {
    // Nothing else registered any more: a writer bypasses, and a batch after it does too.
    RowLockBypass::Batch writing(&bypass, /*writer=*/true);
    RowLockBypass::Piece piece(&writing);
    EXPECT_TRUE(piece.Bypassing(64));
  }
  RowLockBypass::Batch after(&bypass, /*writer=*/true);
  RowLockBypass::Piece piece(&after);
  EXPECT_TRUE(piece.Bypassing(64));
}


// A writer that comes while readers bypass registers; every reader switches to the locks within
// kCheckBytes and the writer gets in while they still run.
TEST(RowLockBypassTest, WriterStopsEveryBypassingReader) {
  RowLockBypass bypass;
  RowLockBypass::Batch first(&bypass, /*writer=*/false);
  RowLockBypass::Piece first_piece(&first);
  RowLockBypass::Batch second(&bypass, /*writer=*/false);
  RowLockBypass::Piece second_piece(&second);
  ASSERT_TRUE(first_piece.Bypassing(64));
  ASSERT_TRUE(second_piece.Bypassing(64));
  std::atomic<bool> writer_in{false};
  std::thread writer([&] {
    RowLockBypass::Batch batch(&bypass, /*writer=*/true);
    RowLockBypass::Piece piece(&batch);
    EXPECT_FALSE(piece.Bypassing(64));  // readers are still running: it takes locks
    writer_in = true;
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int64_t i = 1; first_piece.Bypassing(64) || second_piece.Bypassing(64); ++i) {
    if (i % (1 << 20) == 0 && std::chrono::steady_clock::now() > give_up) break;
  }
  EXPECT_FALSE(first_piece.Bypassing(64));
  EXPECT_FALSE(second_piece.Bypassing(64));
  writer.join();  // in while both readers' batches are still open
  EXPECT_TRUE(writer_in.load());
}

// A writer that finds another writer bypassing (and nothing registered) waits for that batch to
// end instead of turning it to the locks, then bypasses in its turn.
TEST(RowLockBypassTest, WriterWaitsForABypassingWriter_ThenBypasses) {
  RowLockBypass bypass;
  std::atomic<bool> started{false};
  std::atomic<bool> second_bypassed{false};
  std::thread second;
  {
    RowLockBypass::Batch batch(&bypass, /*writer=*/true);
    RowLockBypass::Piece piece(&batch);
    ASSERT_TRUE(piece.Bypassing(64));
    second = std::thread([&] {
      RowLockBypass::Batch waiting(&bypass, /*writer=*/true);
      started = true;
      RowLockBypass::Piece waiting_piece(&waiting);
      second_bypassed = waiting_piece.Bypassing(64);
    });
    // However long the first batch runs, the second neither starts nor stops it.
    for (int round = 0; round < 20; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      for (int64_t i = 0; i < 2 * RowLockBypass::kCheckBytes / 64; ++i) {
        ASSERT_TRUE(piece.Bypassing(64));
      }
      EXPECT_FALSE(started.load());
    }
  }
  second.join();
  EXPECT_TRUE(started.load());
  EXPECT_TRUE(second_bypassed.load());
}

// A locked writer doesn't wait for a bypassing writer's turn to end: it registers, the bypassing
// writer switches to the locks, and the second gets in while the first still runs.
TEST(RowLockBypassTest, LockedWriter_GetsInWhileABypassingWriterRuns) {
  RowLockBypass bypass;
  RowLockBypass::Batch batch(&bypass, /*writer=*/true);
  RowLockBypass::Piece piece(&batch);
  ASSERT_TRUE(piece.Bypassing(64));
  std::atomic<bool> second_in{false};
  std::thread second([&] {
    RowLockBypass::Locked other(&bypass, /*writer=*/true);
    second_in = true;
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int64_t i = 1; piece.Bypassing(64); ++i) {
    if (i % (1 << 20) == 0 && std::chrono::steady_clock::now() > give_up) break;
  }
  EXPECT_FALSE(piece.Bypassing(64));
  second.join();  // in while the first batch is still open
  EXPECT_TRUE(second_in.load());
}

// A reader that registers while a writer waits behind a bypassing one: the running writer
// switches to the locks, and the waiting one, once in, takes locks too.
TEST(RowLockBypassTest, ReaderComesWhileAWriterWaits_BothWritersTakeLocks) {
  RowLockBypass bypass;
  std::atomic<bool> second_done{false};
  std::atomic<bool> second_bypassed{true};
  RowLockBypass::Batch batch(&bypass, /*writer=*/true);
  RowLockBypass::Piece piece(&batch);
  ASSERT_TRUE(piece.Bypassing(64));
  std::thread second([&] {
    RowLockBypass::Batch waiting(&bypass, /*writer=*/true);
    RowLockBypass::Piece waiting_piece(&waiting);
    second_bypassed = waiting_piece.Bypassing(64);
    second_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // lets the second writer wait
  std::atomic<bool> reader_leave{false};
  std::thread reader([&] {
    RowLockBypass::Locked registered(&bypass, /*writer=*/false);
    while (!reader_leave.load()) std::this_thread::yield();
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int64_t i = 1; piece.Bypassing(64); ++i) {
    if (i % (1 << 20) == 0 && std::chrono::steady_clock::now() > give_up) break;
  }
  EXPECT_FALSE(piece.Bypassing(64));
  second.join();  // got in while the first batch and the reader are still open
  EXPECT_TRUE(second_done.load());
  EXPECT_FALSE(second_bypassed.load());
  reader_leave = true;
  reader.join();
}

}  // namespace
}  // namespace pstrain
