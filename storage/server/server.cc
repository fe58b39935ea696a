#include "storage/server/server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "core/logging.h"
#include "local/framed_socket.h"
#include "storage/server/node.h"
#include "storage/server/session.h"

namespace ptstore::storage {

Server::Server(Node* node, ServerOptions options) : node_(node), options_(std::move(options)) {}

Server::~Server() { Stop(); }

Status Server::Start() {
  PTS_ASSIGN_OR_RETURN(listen_fd_, local::ListenUnix(options_.socket_path, options_.socket_mode));
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  reap_thread_ = std::thread([this] { ReapLoop(); });
  PTS_INFO("server", "listening on " << options_.socket_path);
  return Status::OK();
}

void Server::AcceptLoop() {
  while (!stopping_.load()) {
    struct pollfd pfd {listen_fd_, POLLIN, 0};
    int pr = poll(&pfd, 1, 200);
    if (pr <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EINTR && errno != EAGAIN) PTS_WARN("server", "accept: " << ErrnoError("accept", errno).message());
      continue;
    }
    auto creds = local::PeerCredentials(fd);
    if (!creds.ok()) {
      PTS_WARN("server", "refusing a client: " << creds.status().ToString());
      close(fd);
      continue;
    }
    core::MutexLock lk(mu_);
    // Finished sessions are joined here, off the hot path of their peers.
    sessions_.remove_if([](const std::unique_ptr<Session>& s) { return s->done(); });
    auto refuse = [&](const std::string& why) {
      // Rate-limited: a flood must not fill the log either.
      if (refused_.fetch_add(1) % 1000 == 0) {
        PTS_WARN("server", "refusing a client (pid " << creds->pid << ", uid " << creds->uid << "): " << why << " ["
                                                     << refused_.load() << " refused so far]");
      }
      close(fd);
    };
    if (sessions_.size() >= options_.max_sessions) {
      refuse(std::to_string(sessions_.size()) + " sessions already open (server.max_sessions)");
      continue;
    }
    if (creds->uid != 0) {
      uint32_t of_uid = 0;
      for (const auto& s : sessions_) of_uid += !s->done() && s->peer().uid == creds->uid;
      if (of_uid >= options_.max_sessions_per_uid) {
        refuse("uid " + std::to_string(creds->uid) + " holds " + std::to_string(of_uid) +
               " sessions already (server.max_sessions_per_uid)");
        continue;
      }
    }
    auto s = std::make_unique<Session>(node_, &options_, fd, next_session_++, *creds);
    s->Start();
    sessions_.push_back(std::move(s));
  }
}

uint64_t Server::sessions_open() const {
  core::MutexLock lk(mu_);
  uint64_t n = 0;
  for (const auto& s : sessions_) n += s->done() ? 0 : 1;
  return n;
}

void Server::ReapLoop() {
  core::UniqueLock lk(mu_);
  while (!stopping_.load()) {
    reap_cv_.WaitFor(lk, std::chrono::milliseconds(options_.lease_reap_ms));
    if (stopping_.load()) break;
    lk.Unlock();
    node_->store().ExpireLeases(Store::Clock::now());
    lk.Lock();
  }
}

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  // Through mu_, so the wake-up cannot fall between the reaper's check of
  // stopping_ and its wait (it holds mu_ from one to the other): without
  // it, Stop could wait a whole lease_reap_ms for the reaper.
  { core::MutexLock lk(mu_); }
  reap_cv_.NotifyAll();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (reap_thread_.joinable()) reap_thread_.join();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(options_.socket_path.c_str());
    listen_fd_ = -1;
  }
  std::list<std::unique_ptr<Session>> sessions;
  {
    core::MutexLock lk(mu_);
    sessions.swap(sessions_);
  }
  for (auto& s : sessions) s->Stop();
  sessions.clear();  // joins each
  PTS_INFO("server", "stopped");
}

}  // namespace ptstore::storage
