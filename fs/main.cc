// ptstore-fuse: mounts the local ptstored as a filesystem (ptstore(7),
// mount.ptstore(8)).
//
//   ptstore-fuse MOUNTPOINT [-o socket=PATH,allow_other,layout=...] [-f] [-d] [-s]
//
// A thin main over fs/: parse options, check the store is there, mount,
// daemonize, serve (fs/session_loop.h: on up to -o max_threads threads, one
// with -s), unmount.
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "fs/filesystem.h"
#include "fs/options.h"
#include "fs/session_loop.h"

namespace {

using ptstore::fs::Filesystem;

int Run(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  fuse_cmdline_opts cmd{};
  // fuse_opt_parse and fuse_parse_cmdline allocate: freed on every return.
  struct Cleanup {
    fuse_args* args;
    fuse_cmdline_opts* cmd;
    ~Cleanup() {
      free(cmd->mountpoint);
      fuse_opt_free_args(args);
    }
  } cleanup{&args, &cmd};
  auto options = ptstore::fs::ParseMountOptions(&args);
  if (!options.ok()) {
    std::fprintf(stderr, "ptstore-fuse: %s\n", options.status().message().c_str());
    return 2;
  }
  if (fuse_parse_cmdline(&args, &cmd) != 0) return 2;
  if (cmd.show_help) {
    std::printf("usage: %s MOUNTPOINT [options]\n\n", argv[0]);
    fuse_cmdline_help();
    fuse_lowlevel_help();
    std::printf("%s", ptstore::fs::MountOptionsHelp());
    return 0;
  }
  if (cmd.show_version) {
    std::printf("ptstore-fuse %s\n", PTSTORE_VERSION);
    fuse_lowlevel_version();
    return 0;
  }
  if (cmd.mountpoint == nullptr) {
    std::fprintf(stderr, "usage: %s MOUNTPOINT [options] (--help for more)\n", argv[0]);
    return 2;
  }
  // Connect once before mounting so that a wrong socket or missing rights
  // fail here, on the terminal; the serving client is made after
  // fuse_daemonize (Filesystem::Start).
  if (auto probe = Filesystem::Connect(*options); !probe.ok()) {
    std::fprintf(stderr, "ptstore-fuse: %s\n", probe.status().ToString().c_str());
    return 1;
  }
  // The kernel checks permissions against our attributes (namespace owner,
  // group, mode); fsname shows the socket in mount(8) and df(1).
  std::string fixed = "-odefault_permissions,subtype=ptstore,fsname=" + options->socket_path;
  fuse_opt_add_arg(&args, fixed.c_str());

  Filesystem fs(*options);
  int rc = 1;
  fuse_session* se = fuse_session_new(&args, &Filesystem::Ops(), sizeof(fuse_lowlevel_ops), &fs);
  if (se == nullptr) goto out_args;
  if (fuse_set_signal_handlers(se) != 0) goto out_session;
  if (fuse_session_mount(se, cmd.mountpoint) != 0) goto out_signals;
  fuse_daemonize(cmd.foreground);
  if (options->readahead_kb > 0) {
    // Cold reads of kv files in 1 MiB requests rather than 128 KiB ones.
    if (ptstore::Status ra = ptstore::fs::SetMountReadahead(cmd.mountpoint, options->readahead_kb); !ra.ok()) {
      std::fprintf(stderr, "ptstore-fuse: cannot set the mount's readahead (%s); cold reads will be slower\n",
                   ra.ToString().c_str());
    }
  }
  {
    // The exit signals go to this thread alone (fs/session_loop.h): the
    // threads fs.Start makes inherit them blocked.
    const sigset_t exit_signals = ptstore::fs::ExitSignals();
    sigset_t before;
    pthread_sigmask(SIG_BLOCK, &exit_signals, &before);
    auto started = fs.Start(se);
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (!started.ok()) {
      std::fprintf(stderr, "ptstore-fuse: %s\n", started.ToString().c_str());
      goto out_unmount;
    }
  }
  {
    ptstore::fs::SessionLoopOptions loop;
    loop.max_threads = cmd.singlethread ? 1 : cmd.max_threads;
    loop.spin_us = options->spin_us;
    rc = ptstore::fs::RunSessionLoop(se, loop);
  }
  // The kernel ends the connection when the mount goes away (umount, or
  // the last open file of a lazy umount closing). A reader then gets
  // ENODEV, or ECONNABORTED when the kernel aborted the connection while
  // tearing the superblock down (libfuse 3.14 reports only ENODEV as a
  // clean end): both are a normal unmount, not an error.
  if (rc == -ECONNABORTED || rc == ECONNABORTED) {
    std::fprintf(stderr, "ptstore-fuse: the kernel ended the connection (unmounted)\n");
    rc = 0;
  }
  fs.Stop();
out_unmount:
  fuse_session_unmount(se);
out_signals:
  fuse_remove_signal_handlers(se);
out_session:
  fuse_session_destroy(se);
out_args:
  return rc == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
