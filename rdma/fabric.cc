// Opening a Fabric, registering its region, its peers and its teardown
// (rdma/fabric.h); the read path is fabric_read.cc, the bookkeeping both
// share rdma/fabric_ops.h.
#include "rdma/fabric.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstring>
#include <algorithm>

#include "core/logging.h"
#include "rdma/fabric_ops.h"

namespace ptstore::rdma {

using fabric_detail::Clock;
using fabric_detail::FiError;
using fabric_detail::kCompletionBatch;
using fabric_detail::kLog;

namespace {

constexpr uint32_t kAddressMagic = 0x31465450;  // "PTF1" little-endian
constexpr size_t kAddressHeader = 24;           // magic u32, name length u32, base u64, length u64
constexpr auto kCloseGrace = std::chrono::milliseconds(500);

std::string Describe(const FabricOptions& o) {
  std::string s = "provider '" + (o.provider.empty() ? std::string("any") : o.provider) + "'";
  if (!o.node.empty()) s += " on " + o.node;
  return s;
}

struct InfoDeleter {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// fi_getinfo for an FI_EP_RDM endpoint that can read remote memory and be
// read: the offers for `o`, best first.
Result<InfoPtr> GetInfo(const FabricOptions& o) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return Internal("fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
  // Our op contexts start with an fi_context2, so either mode is fine.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  // The registration modes handled (rdma/fabric.h): local descriptors,
  // virtual addresses, provider keys, allocated memory, binding to the
  // endpoint. Not FI_MR_RAW (keys wider than 64 bits) nor FI_MR_HMEM.
  hints->domain_attr->mr_mode = o.legacy_mr_basic ? FI_MR_BASIC
                                                  : (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                                     FI_MR_PROV_KEY | FI_MR_ENDPOINT);
  if (!o.provider.empty()) hints->fabric_attr->prov_name = strdup(o.provider.c_str());
  fi_info* info = nullptr;
  int ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), o.node.empty() ? nullptr : o.node.c_str(),
                       nullptr, o.node.empty() ? 0 : FI_SOURCE, hints.get(), &info);
  if (ret != 0 || info == nullptr) {
    std::string m = "libfabric " + Describe(o) + " offers no FI_EP_RDM endpoint with FI_RMA|FI_READ|FI_REMOTE_READ: " +
                    FiError(ret) + " (ptstore-stat --fabric lists what this machine offers)";
    if (ret == -FI_EINVAL) return InvalidArgument(std::move(m));
    return Unavailable(std::move(m));
  }
  return InfoPtr(info);
}

FabricChoice ChoiceOf(const fi_info* i) {
  FabricChoice c;
  c.provider = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
  c.fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
  c.domain = i->domain_attr->name ? i->domain_attr->name : "";
  char buf[64];
  c.endpoint_type = fi_tostr_r(buf, sizeof(buf), &i->ep_attr->type, FI_TYPE_EP_TYPE);
  c.max_msg_size = i->ep_attr->max_msg_size;
  uint64_t mode = static_cast<uint64_t>(i->domain_attr->mr_mode);
  bool basic = mode == FI_MR_BASIC;
  c.virtual_addresses = basic || (mode & FI_MR_VIRT_ADDR);
  c.provider_keys = basic || (mode & FI_MR_PROV_KEY);
  c.local_registration = (mode & FI_MR_LOCAL) != 0;
  c.manual_progress = i->domain_attr->data_progress == FI_PROGRESS_MANUAL;
  return c;
}

void PutU32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetLE(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

bool Fabric::CloseMayCrash() const {
  const uint32_t v = fi_version();
  if (FI_MAJOR(v) > 1 || (FI_MAJOR(v) == 1 && FI_MINOR(v) >= 18)) return false;
  return choice_.provider.find("tcp") != std::string::npos || choice_.provider.find("net") != std::string::npos;
}

Result<FabricChoice> ChooseFabric(const FabricOptions& options) {
  PTS_ASSIGN_OR_RETURN(InfoPtr info, GetInfo(options));
  return ChoiceOf(info.get());
}

Result<std::unique_ptr<Fabric>> Fabric::Open(const FabricOptions& options) {
  if (options.read_window == 0) return InvalidArgument("FabricOptions.read_window must be at least 1");
  PTS_ASSIGN_OR_RETURN(InfoPtr info, GetInfo(options));
  std::unique_ptr<Fabric> f(new Fabric());
  f->options_ = options;
  f->choice_ = ChoiceOf(info.get());
  f->info_ = info.release();
  const std::string who = "libfabric " + f->choice_.provider + " (" + Describe(options) + ")";
  auto fail = [&](const char* what, int ret) {
    std::string m = who + ": " + what + ": " + FiError(ret);
    return ret == -FI_EINVAL ? InvalidArgument(std::move(m)) : Unavailable(std::move(m));
  };

  uint64_t max_msg = f->info_->ep_attr->max_msg_size;
  if (max_msg == 0) max_msg = UINT64_MAX;
  f->max_read_ = options.max_read_bytes ? std::min<uint64_t>(options.max_read_bytes, max_msg) : max_msg;

  int ret = fi_fabric(f->info_->fabric_attr, &f->fabric_, nullptr);
  if (ret) return fail("fi_fabric", ret);
  ret = fi_domain(f->fabric_, f->info_, &f->domain_, nullptr);
  if (ret) return fail("fi_domain", ret);

  fi_av_attr av_attr{};
  av_attr.type = f->info_->domain_attr->av_type;
  ret = fi_av_open(f->domain_, &av_attr, &f->av_, nullptr);
  if (ret) return fail("fi_av_open", ret);

  // A CQ with a wait object lets the idle progress thread block; some
  // providers (efa) have none, then it sleeps between polls.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  cq_attr.size = 0;
  ret = fi_cq_open(f->domain_, &cq_attr, &f->cq_, nullptr);
  if (ret == 0) {
    f->cq_waitable_ = true;
  } else {
    cq_attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(f->domain_, &cq_attr, &f->cq_, nullptr);
    if (ret) return fail("fi_cq_open", ret);
  }

  ret = fi_endpoint(f->domain_, f->info_, &f->ep_, nullptr);
  if (ret) return fail("fi_endpoint", ret);
  ret = fi_ep_bind(f->ep_, &f->av_->fid, 0);
  if (ret) return fail("binding the address vector", ret);
  ret = fi_ep_bind(f->ep_, &f->cq_->fid, FI_TRANSMIT | FI_RECV);
  if (ret) return fail("binding the completion queue", ret);
  ret = fi_enable(f->ep_);
  if (ret) return fail("fi_enable", ret);

  size_t len = 0;
  ret = fi_getname(&f->ep_->fid, nullptr, &len);
  if (ret != -FI_ETOOSMALL && ret != 0) return fail("fi_getname", ret);
  f->name_.resize(len);
  ret = fi_getname(&f->ep_->fid, f->name_.data(), &len);
  if (ret) return fail("fi_getname", ret);
  f->name_.resize(len);

  f->progress_ = std::thread([p = f.get()] { p->ProgressLoop(); });
  PTS_INFO(kLog, "opened " << f->choice_.provider << " " << f->choice_.endpoint_type << " fabric "
                           << f->choice_.fabric << " domain " << f->choice_.domain
                           << (f->cq_waitable_ ? "" : " (CQ without wait object: polling)"));
  return f;
}

Fabric::~Fabric() {
  // Reads still in flight (of Reads that timed out) get a moment to finish
  // while the progress thread still runs: see the next comment.
  const auto grace_end = Clock::now() + kCloseGrace;
  while (progress_.joinable() && reads_in_flight() > 0 && Clock::now() < grace_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (progress_.joinable()) {
    stop_.store(true);
    if (cq_waitable_) (void)fi_cq_signal(cq_);
    progress_.join();
  }
  // libfabric before 1.18: closing a tcp endpoint while a read's response
  // is half received completes that read twice, the second time with a
  // NULL context, and rxm crashes on it (upstream a74ea0fcd, "prov/tcp:
  // Suspicion of bug where RX entry is freed twice"). When a peer stopped
  // answering mid-read, leave the endpoint open instead: nothing polls it
  // any more, so nothing more lands in the region; its memory and sockets
  // are lost (this happens at shutdown).
  if (ep_ && reads_in_flight() > 0 && CloseMayCrash()) {
    core::MutexLock l(inflight_mu_);
    PTS_WARN(kLog, "closing with " << inflight_.size() << " reads still in flight on " << choice_.provider
                                   << " (libfabric " << FI_MAJOR(fi_version()) << "." << FI_MINOR(fi_version())
                                   << "), whose close could crash: the endpoint is left open");
    for (OpContext* op : inflight_) delete op;
    inflight_.clear();
    return;
  }
  // Closing the endpoint fails (or drops) whatever is still in flight; the
  // contexts left are freed here, nobody waits on them any more.
  if (ep_) fi_close(&ep_->fid);
  if (cq_) {
    fi_cq_entry entries[kCompletionBatch];
    for (int i = 0; i < 1000; ++i) {
      ssize_t n = fi_cq_read(cq_, entries, kCompletionBatch);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        (void)fi_cq_readerr(cq_, &err, 0);
      } else if (n <= 0) {
        break;
      }
    }
  }
  {
    core::MutexLock l(inflight_mu_);
    for (OpContext* op : inflight_) delete op;
    inflight_.clear();
  }
  peers_.clear();  // their AV entries, before the AV
  if (mr_) fi_close(&mr_->fid);
  if (cq_) fi_close(&cq_->fid);
  if (av_) fi_close(&av_->fid);
  if (domain_) fi_close(&domain_->fid);
  if (fabric_) fi_close(&fabric_->fid);
  if (info_) fi_freeinfo(info_);
}

Status Fabric::RegisterRegion(uint8_t* base, uint64_t length, uint64_t requested_key) {
  core::MutexLock l(region_mu_);
  if (mr_) return InvalidArgument("fabric: a region is already registered (RegisterRegion is called once)");
  if (base == nullptr || length == 0) return InvalidArgument("fabric: cannot register an empty region");
  size_t key_size = info_->domain_attr->mr_key_size;
  if (!choice_.provider_keys && key_size < 8 && (requested_key >> (8 * key_size)) != 0) {
    return InvalidArgument("fabric: key " + std::to_string(requested_key) + " is wider than " + choice_.provider +
                           "'s " + std::to_string(key_size) + "-byte keys");
  }
  fid_mr* mr = nullptr;
  int ret = fi_mr_reg(domain_, base, length, FI_REMOTE_READ | FI_READ, 0, requested_key, 0, &mr, nullptr);
  if (ret) {
    return Status(ret == -FI_EINVAL || ret == -FI_ENOKEY || ret == -FI_EKEYREJECTED ? Code::kInvalidArgument
                                                                                    : Code::kUnavailable,
                  "fabric: registering " + std::to_string(length) + " bytes with " + choice_.provider +
                      " (key " + std::to_string(requested_key) + "): " + FiError(ret));
  }
  if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    ret = fi_mr_bind(mr, &ep_->fid, 0);
    if (ret == 0) ret = fi_mr_enable(mr);
    if (ret) {
      fi_close(&mr->fid);
      return Unavailable("fabric: binding the region to the " + choice_.provider + " endpoint: " + FiError(ret));
    }
  }
  mr_ = mr;
  mr_desc_ = fi_mr_desc(mr);
  region_base_ = base;
  region_length_ = length;
  region_key_ = choice_.provider_keys ? fi_mr_key(mr) : requested_key;
  registered_.store(true, std::memory_order_release);
  PTS_INFO(kLog, "registered " << length << " bytes for remote reads, key " << region_key_
                               << (choice_.virtual_addresses ? " (virtual addresses)" : " (offsets)"));
  return Status::OK();
}

uint64_t Fabric::region_key() const { return region_key_; }

std::vector<uint8_t> Fabric::address() const {
  std::vector<uint8_t> b;
  b.reserve(kAddressHeader + name_.size());
  bool reg = registered_.load(std::memory_order_acquire);
  PutU32(b, kAddressMagic);
  PutU32(b, static_cast<uint32_t>(name_.size()));
  PutU64(b, reg ? reinterpret_cast<uintptr_t>(region_base_) : 0);
  PutU64(b, reg ? region_length_ : 0);
  b.insert(b.end(), name_.begin(), name_.end());
  return b;
}

Result<uint64_t> Fabric::AddPeer(std::span<const uint8_t> address) {
  if (address.size() < kAddressHeader || GetLE(address.data(), 4) != kAddressMagic ||
      GetLE(address.data() + 4, 4) != address.size() - kAddressHeader || address.size() == kAddressHeader) {
    return InvalidArgument("fabric: not a fabric address (" + std::to_string(address.size()) +
                           " bytes; expected what Fabric::address() gives)");
  }
  Peer p;
  p.region_base = GetLE(address.data() + 8, 8);
  p.region_length = GetLE(address.data() + 16, 8);
  p.has_region = p.region_length != 0;
  const uint8_t* name = address.data() + kAddressHeader;
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  int ret = fi_av_insert(av_, name, 1, &addr, 0, nullptr);
  if (ret != 1) {
    return InvalidArgument("fabric: " + choice_.provider + " refused a peer address: " +
                           FiError(ret < 0 ? ret : -FI_EINVAL));
  }
  p.fi_addr = addr;
  char buf[128];
  size_t len = sizeof(buf);
  if (fi_av_straddr(av_, name, buf, &len) != nullptr) {
    p.name.assign(buf, strnlen(buf, sizeof(buf)));
  } else {
    p.name = "fi_addr " + std::to_string(addr);
  }
  // The address leaves the AV when the last user of the entry lets go: the
  // map, or a Read still posting to it when RemovePeer ran.
  fid_av* av = av_;
  std::shared_ptr<const Peer> entry(new Peer(std::move(p)), [av](const Peer* q) {
    fi_addr_t a = q->fi_addr;
    if (int r = fi_av_remove(av, &a, 1, 0); r != 0) PTS_WARN(kLog, "removing peer " << q->name << ": " << FiError(r));
    delete q;
  });
  core::WriterLock l(peers_mu_);
  uint64_t handle = next_peer_++;
  peers_.emplace(handle, std::move(entry));
  return handle;
}

void Fabric::RemovePeer(uint64_t peer) {
  std::shared_ptr<const Peer> entry;
  {
    core::WriterLock l(peers_mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return;
    entry = std::move(it->second);
    peers_.erase(it);
  }
  // entry goes here, or with the last Read using it.
}

}  // namespace ptstore::rdma
