// A tensor's explicit states (storage/index/tensor.h): every legal
// transition, the illegal ones stopping the process (death tests: the check
// is always on), and the store's typed references (storage/cache/
// tensor_refs.h) released on scope exit, early return, move and Release,
// against a real Store.
#include <optional>
#include <utility>

#include <gtest/gtest.h>

#include "core/mutex.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"
#include "storage/index/tensor.h"
#include "tests/storage/store_testing.h"

namespace ptstore::storage {
namespace {

using R = Tensor::Residence;
using K = Tensor::Kind;
using L = Tensor::Life;
using Io = Tensor::Io;

SsdLocation Loc(uint64_t segment, uint64_t offset) {
  SsdLocation l;
  l.segment = segment;
  l.offset = offset;
  l.payload_bytes = 4096;
  return l;
}

TEST(TensorStateTest, ANewTensorIsOwnedNowhereAndNotIndexed) {
  Tensor t;
  EXPECT_EQ(t.residence(), R::kNowhere);
  EXPECT_EQ(t.kind(), K::kOwned);
  EXPECT_EQ(t.life(), L::kNew);
  EXPECT_EQ(t.io(), Io::kNone);
  EXPECT_FALSE(t.in_dram());
  EXPECT_FALSE(t.on_ssd());
  EXPECT_FALSE(t.remote());
  EXPECT_FALSE(t.transient());
  EXPECT_FALSE(t.in_index());
  EXPECT_FALSE(t.busy());
  EXPECT_FALSE(t.stub_on_ssd());
  EXPECT_EQ(t.pins(), 0u);
  EXPECT_EQ(t.holds(), 0u);
}

TEST(TensorStateTest, AnOwnedTensorIsSavedSpilledFilledCompactedAndDropped) {
  Tensor t;
  t.MarkFilled(8192, 4096);  // a save's copy
  EXPECT_EQ(t.residence(), R::kDram);
  EXPECT_EQ(t.arena_offset, 8192u);
  EXPECT_EQ(t.allocated, 4096u);
  t.EnterIndex();
  EXPECT_TRUE(t.in_index());
  EXPECT_EQ(t.life(), L::kIndexed);

  t.BeginIo(Io::kSpilling);
  EXPECT_TRUE(t.busy());
  EXPECT_EQ(t.io(), Io::kSpilling);
  t.EndIo(Io::kSpilling);
  t.MarkSpilled(Loc(1, 0));
  EXPECT_EQ(t.residence(), R::kDramAndSsd);
  EXPECT_TRUE(t.in_dram());
  EXPECT_TRUE(t.on_ssd());
  EXPECT_EQ(t.ssd(), Loc(1, 0));

  t.DropDram();  // evicted from DRAM, kept on SSD
  EXPECT_EQ(t.residence(), R::kSsd);
  EXPECT_EQ(t.allocated, 0u);
  EXPECT_FALSE(t.in_dram());

  t.BeginIo(Io::kFilling);
  t.EndIo(Io::kFilling);
  t.MarkFilled(0, 4096);  // a pin read it back
  EXPECT_EQ(t.residence(), R::kDramAndSsd);

  t.BeginIo(Io::kCopying);
  t.EndIo(Io::kCopying);
  t.MoveRecord(Loc(2, 64));  // compaction
  EXPECT_EQ(t.ssd(), Loc(2, 64));

  t.DropSsd();  // the tier evicted its copy
  EXPECT_EQ(t.residence(), R::kDram);
  t.DropDram();
  EXPECT_EQ(t.residence(), R::kNowhere);
  t.LeaveIndex();
  EXPECT_EQ(t.life(), L::kLeft);
  EXPECT_FALSE(t.in_index());
}

TEST(TensorStateTest, ASpilledTensorMayLoseItsRecordFirst) {
  Tensor t;
  t.MarkFilled(0, 4096);
  t.MarkSpilled(Loc(1, 0));
  t.DropSsd();
  EXPECT_EQ(t.residence(), R::kDram);
  t.MarkSpilled(Loc(3, 0));  // spilled again later
  t.DropDram();
  t.DropSsd();
  EXPECT_EQ(t.residence(), R::kNowhere);
}

TEST(TensorStateTest, RecoveryFilesAnOwnedTensorFromItsRecord) {
  Tensor t;
  t.MarkRecovered(Loc(4, 128));
  EXPECT_EQ(t.residence(), R::kSsd);
  EXPECT_EQ(t.kind(), K::kOwned);
  EXPECT_EQ(t.ssd(), Loc(4, 128));
  t.EnterIndex();
  EXPECT_TRUE(t.in_index());
}

TEST(TensorStateTest, ARemotePlaceholderIsFetchedKeptAndAdopted) {
  Tensor t;
  t.BecomeRemote(7);
  EXPECT_EQ(t.kind(), K::kRemote);
  EXPECT_TRUE(t.remote());
  EXPECT_EQ(t.owner(), 7u);
  EXPECT_EQ(t.residence(), R::kNowhere);  // a placeholder
  t.EnterIndex();
  t.SetStub(Loc(1, 0));  // an owned tensor below it spilled
  EXPECT_TRUE(t.stub_on_ssd());
  EXPECT_EQ(t.stub(), Loc(1, 0));
  t.MoveStub(Loc(5, 0));
  EXPECT_EQ(t.stub(), Loc(5, 0));

  t.BeginIo(Io::kFilling);
  t.EndIo(Io::kFilling);
  t.MarkFilled(4096, 4096);  // kept as a replica
  EXPECT_EQ(t.kind(), K::kRemote);
  EXPECT_TRUE(t.in_dram());
  t.DropDram();  // evicted: a placeholder again
  EXPECT_EQ(t.kind(), K::kRemote);
  EXPECT_EQ(t.residence(), R::kNowhere);

  t.MarkFilled(4096, 4096);
  t.Adopt(3);  // its owner restarted
  EXPECT_EQ(t.kind(), K::kOwned);
  EXPECT_EQ(t.owner(), 3u);
  EXPECT_TRUE(t.stub_on_ssd());  // the stub it had stays until it goes
  t.MarkSpilled(Loc(6, 0));     // now its own: it may be spilled
  EXPECT_EQ(t.residence(), R::kDramAndSsd);
  t.ForgetStub();
  EXPECT_FALSE(t.stub_on_ssd());
}

TEST(TensorStateTest, ATransientReplicaIsAPlaceholderAgainWhenItsBytesGo) {
  Tensor t;
  t.BecomeRemote(2);
  t.EnterIndex();
  t.MarkFilled(0, 8192);
  t.BecomeTransient();
  EXPECT_EQ(t.kind(), K::kTransient);
  EXPECT_TRUE(t.transient());
  EXPECT_TRUE(t.remote());
  t.DropDram();
  EXPECT_EQ(t.kind(), K::kRemote);
  EXPECT_FALSE(t.transient());
  EXPECT_EQ(t.residence(), R::kNowhere);
}

TEST(TensorStateTest, PinCountsSayFirstAndLast) {
  Tensor t;
  EXPECT_TRUE(t.AddPin());
  EXPECT_FALSE(t.AddPin());
  EXPECT_EQ(t.pins(), 2u);
  EXPECT_FALSE(t.DropPin());
  EXPECT_TRUE(t.DropPin());
  EXPECT_EQ(t.pins(), 0u);
}

// ------------------------------------------------- illegal transitions

#define EXPECT_ILLEGAL(stmt, transition) \
  EXPECT_DEATH(stmt, "illegal tensor transition " transition " of tensor")

TEST(TensorStateDeathTest, IndexLifeGoesOneWay) {
  EXPECT_ILLEGAL(({ Tensor t; t.EnterIndex(); t.EnterIndex(); }), "EnterIndex");
  EXPECT_ILLEGAL(({ Tensor t; t.LeaveIndex(); }), "LeaveIndex");
  EXPECT_ILLEGAL(({ Tensor t; t.EnterIndex(); t.LeaveIndex(); t.EnterIndex(); }), "EnterIndex");
  EXPECT_ILLEGAL(({ Tensor t; t.EnterIndex(); t.LeaveIndex(); t.LeaveIndex(); }), "LeaveIndex");
}

TEST(TensorStateDeathTest, BytesArriveOnlyWhereThereAreNone) {
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.MarkFilled(0, 1); }), "MarkFilled");
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.MarkSpilled(Loc(1, 0)); t.MarkFilled(0, 1); }), "MarkFilled");
  EXPECT_ILLEGAL(({ Tensor t; t.DropDram(); }), "DropDram");
  EXPECT_ILLEGAL(({ Tensor t; t.MarkRecovered(Loc(1, 0)); t.DropDram(); }), "DropDram");
}

TEST(TensorStateDeathTest, OnlyOwnedDramOnlyTensorsAreSpilled) {
  EXPECT_ILLEGAL(({ Tensor t; t.MarkSpilled(Loc(1, 0)); }), "MarkSpilled");  // nothing in DRAM
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.MarkSpilled(Loc(1, 0)); t.MarkSpilled(Loc(2, 0)); }),
                 "MarkSpilled");
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.MarkFilled(0, 1); t.MarkSpilled(Loc(1, 0)); }), "MarkSpilled");
}

TEST(TensorStateDeathTest, ARecordIsReadOrMovedOnlyWhenThere) {
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); (void)t.ssd(); }), "ssd\\(\\)");
  EXPECT_ILLEGAL(({ Tensor t; t.MoveRecord(Loc(1, 0)); }), "MoveRecord");
  EXPECT_ILLEGAL(({ Tensor t; t.DropSsd(); }), "DropSsd");
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.DropSsd(); }), "DropSsd");
}

TEST(TensorStateDeathTest, RecoveryAndRemoteApplyToNewTensorsOnly) {
  EXPECT_ILLEGAL(({ Tensor t; t.EnterIndex(); t.MarkRecovered(Loc(1, 0)); }), "MarkRecovered");
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.MarkRecovered(Loc(1, 0)); }), "MarkRecovered");
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.MarkRecovered(Loc(1, 0)); }), "MarkRecovered");
  EXPECT_ILLEGAL(({ Tensor t; t.EnterIndex(); t.BecomeRemote(2); }), "BecomeRemote");
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.BecomeRemote(2); }), "BecomeRemote");
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.BecomeRemote(3); }), "BecomeRemote");
}

TEST(TensorStateDeathTest, OnlyAFetchedRemoteTensorIsTransientOrAdopted) {
  EXPECT_ILLEGAL(({ Tensor t; t.MarkFilled(0, 1); t.BecomeTransient(); }), "BecomeTransient");  // owned
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.BecomeTransient(); }), "BecomeTransient");   // a placeholder
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.MarkFilled(0, 1); t.BecomeTransient(); t.BecomeTransient(); }),
                 "BecomeTransient");
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.EnterIndex(); t.Adopt(1); }), "Adopt");  // a placeholder
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.MarkFilled(0, 1); t.Adopt(1); }), "Adopt");  // not indexed
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.EnterIndex(); t.MarkFilled(0, 1); t.BecomeTransient(); t.Adopt(1); }),
                 "Adopt");
  EXPECT_ILLEGAL(({ Tensor t; t.EnterIndex(); t.MarkFilled(0, 1); t.Adopt(1); }), "Adopt");  // owned already
}

TEST(TensorStateDeathTest, AStubIsWrittenOnceAndGoesOnce) {
  EXPECT_ILLEGAL(({ Tensor t; t.BecomeRemote(2); t.SetStub(Loc(1, 0)); t.SetStub(Loc(2, 0)); }), "SetStub");
  EXPECT_ILLEGAL(({ Tensor t; t.MoveStub(Loc(1, 0)); }), "MoveStub");
  EXPECT_ILLEGAL(({ Tensor t; t.ForgetStub(); }), "ForgetStub");
  EXPECT_ILLEGAL(({ Tensor t; (void)t.stub(); }), "stub\\(\\)");
}

TEST(TensorStateDeathTest, IoIsOneAtATimeAndEndsAsItBegan) {
  EXPECT_ILLEGAL(({ Tensor t; t.BeginIo(Io::kSpilling); t.BeginIo(Io::kFilling); }), "BeginIo");
  EXPECT_ILLEGAL(({ Tensor t; t.BeginIo(Io::kNone); }), "BeginIo");
  EXPECT_ILLEGAL(({ Tensor t; t.EndIo(Io::kFilling); }), "EndIo");
  EXPECT_ILLEGAL(({ Tensor t; t.BeginIo(Io::kCopying); t.EndIo(Io::kFilling); }), "EndIo");
}

TEST(TensorStateDeathTest, APinCountNeverGoesBelowZero) {
  EXPECT_ILLEGAL(({ Tensor t; t.DropPin(); }), "DropPin");
  EXPECT_ILLEGAL(({ Tensor t; t.AddPin(); t.DropPin(); t.DropPin(); }), "DropPin");
}

TEST(TensorStateDeathTest, TheMessageSaysTheState) {
  EXPECT_DEATH(({
                 Tensor t;
                 t.BecomeRemote(2);
                 t.MarkFilled(0, 1);
                 t.BeginIo(Io::kFilling);
                 t.MarkSpilled(Loc(1, 0));
               }),
               "MarkSpilled of tensor 0 \\(residence dram, kind remote, life new, io filling, stub no, pins 0, holds 0\\)");
}

}  // namespace

// ------------------------------------------------- holds and pins (RAII)

// A friend of Store (store.h): the tests' window on its tensors and mutex.
class TensorRefsTest : public store_testing::StoreTest {
 protected:
  core::Mutex& Mu() RETURN_CAPABILITY(store_->mu_) { return store_->mu_; }

  // The tensor of the last increment of `tokens` (saved before).
  Tensor* TensorOf(const store_testing::Tokens& tokens) {
    core::MutexLock lk(store_->mu_);
    Match m = store_->WalkLocked(*store_->namespaces_.at("ns"), tokens);
    EXPECT_FALSE(m.path.empty());
    return m.path.empty() ? nullptr : m.path.back().node->tensor;
  }
  // Whether the store still has the tensor (its struct is not freed).
  bool Alive(TensorId id) {
    core::MutexLock lk(store_->mu_);
    return store_->tensors_.count(id.value) != 0;
  }
  uint32_t Holds(Tensor* t) {
    core::MutexLock lk(store_->mu_);
    return t->holds();
  }
  uint32_t Pins(Tensor* t) {
    core::MutexLock lk(store_->mu_);
    return t->pins();
  }
  TensorHold Hold(Tensor* t) REQUIRES(store_->mu_) { return TensorHold(*store_, t); }
  TensorPin Pin(Tensor* t) REQUIRES(store_->mu_) { return TensorPin(*store_, t); }
  void Remove(const store_testing::Tokens& tokens) { ASSERT_TRUE(store_->Remove("ns", tokens).ok()); }
};

namespace {

using store_testing::RandomTokens;
using store_testing::kBt;
using store_testing::Tokens;

TEST_F(TensorRefsTest, AHoldKeepsARemovedTensorUntilItGoes) {
  const Tokens p = RandomTokens(1, 4 * kBt);
  Save(p);
  Tensor* t = TensorOf(p);
  const TensorId id = t->id;
  std::optional<TensorHold> h;
  {
    core::MutexLock lk(Mu());
    h.emplace(Hold(t));
    EXPECT_EQ(t->holds(), 1u);
  }
  Remove(p);  // the lock is dropped and taken by another step meanwhile
  EXPECT_EQ(Matched(p), 0u);
  ASSERT_TRUE(Alive(id));  // out of the index, but its struct is still there
  {
    core::MutexLock lk(Mu());
    EXPECT_EQ(t->life(), Tensor::Life::kLeft);
    h.reset();  // the last reference: freed
  }
  EXPECT_FALSE(Alive(id));
  EXPECT_EQ(store_->Stats().owned_bytes, 0u);
}

TEST_F(TensorRefsTest, AHoldGoesOnEveryWayOutOfItsScope) {
  const Tokens p = RandomTokens(2, 2 * kBt);
  Save(p);
  Tensor* t = TensorOf(p);
  const TensorId id = t->id;
  auto step = [&](bool early) REQUIRES(Mu()) {
    TensorHold h = Hold(t);
    if (early) return t->holds();
    TensorHold second = Hold(t);
    return t->holds();
  };
  {
    core::MutexLock lk(Mu());
    EXPECT_EQ(step(true), 1u);
    EXPECT_EQ(t->holds(), 0u);
    EXPECT_EQ(step(false), 2u);
    EXPECT_EQ(t->holds(), 0u);
  }
  // None left behind: the removal frees it at once.
  Remove(p);
  EXPECT_FALSE(Alive(id));
}

TEST_F(TensorRefsTest, AMovedHoldIsReleasedOnceByItsNewOwner) {
  const Tokens a = RandomTokens(3, 2 * kBt), b = RandomTokens(4, 2 * kBt);
  Save(a);
  Save(b);
  Tensor* ta = TensorOf(a);
  Tensor* tb = TensorOf(b);
  const TensorId ida = ta->id;
  {
    core::MutexLock lk(Mu());
    TensorHold h1 = Hold(ta);
    TensorHold h2(std::move(h1));  // move construction: one hold, now h2's
    EXPECT_FALSE(h1);
    EXPECT_TRUE(h2);
    EXPECT_EQ(h2.get(), ta);
    EXPECT_EQ(ta->holds(), 1u);
    TensorHold h3 = Hold(tb);
    h3 = std::move(h2);  // move assignment releases what h3 held (tb)
    EXPECT_EQ(tb->holds(), 0u);
    EXPECT_EQ(ta->holds(), 1u);
    EXPECT_FALSE(h2);
    h2.Release();  // a no-op on an empty hold
    h3.Release();
    EXPECT_EQ(ta->holds(), 0u);
    h3.Release();  // and again
    EXPECT_EQ(ta->holds(), 0u);
  }
  EXPECT_TRUE(Alive(ida));  // still in the index: not freed
  Remove(a);
  EXPECT_FALSE(Alive(ida));
}

TEST_F(TensorRefsTest, APinKeepsTheBytesOfARemovedTensorUntilItGoes) {
  const Tokens p = RandomTokens(5, 3 * kBt);
  Save(p);
  Tensor* t = TensorOf(p);
  const TensorId id = t->id;
  const uint64_t allocated = t->allocated;
  std::optional<TensorPin> pin;
  {
    core::MutexLock lk(Mu());
    pin.emplace(Pin(t));
    EXPECT_EQ(t->pins(), 1u);
  }
  EXPECT_EQ(store_->Stats().pinned_bytes, allocated);
  Remove(p);
  ASSERT_TRUE(Alive(id));
  {
    core::MutexLock lk(Mu());
    EXPECT_TRUE(t->in_dram());  // the bytes stay where they are
    EXPECT_FALSE(t->in_index());
    TensorPin moved = std::move(*pin);
    pin.reset();  // the moved-from one releases nothing
    EXPECT_EQ(t->pins(), 1u);
  }  // `moved` goes: the last pin, and the tensor with it
  EXPECT_FALSE(Alive(id));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
}

TEST_F(TensorRefsTest, PinsAndHoldsTogetherFreeAtTheLastOne) {
  const Tokens p = RandomTokens(6, 2 * kBt);
  Save(p);
  Tensor* t = TensorOf(p);
  const TensorId id = t->id;
  std::optional<TensorHold> h;
  std::optional<TensorPin> pin;
  {
    core::MutexLock lk(Mu());
    h.emplace(Hold(t));
    pin.emplace(Pin(t));
  }
  Remove(p);
  {
    core::MutexLock lk(Mu());
    pin.reset();  // the hold still keeps it
  }
  EXPECT_TRUE(Alive(id));
  EXPECT_EQ(Pins(t), 0u);
  EXPECT_EQ(Holds(t), 1u);
  {
    core::MutexLock lk(Mu());
    h.reset();
  }
  EXPECT_FALSE(Alive(id));
}

}  // namespace
}  // namespace ptstore::storage
