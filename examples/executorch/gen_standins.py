#!/usr/bin/env python3
"""Writes the C source of the stand-ins that let the executorch 1.5.1
wheel's LLM custom-ops library (extension/llm/custom_ops/
libcustom_ops_aot_lib.so: llama::custom_sdpa.out and friends) load into the
runner with no PyTorch and no Python. CMakeLists.txt runs it at configure
time; nothing in the output is written by hand.

The library links PyTorch only for its load-time TORCH_LIBRARY registration
(the ops' ATen variants, for export in Python). Its ExecuTorch kernels
(registered by EXECUTORCH_LIBRARY through libexecutorch.so) call none of it.
So:

- The registration: every TORCH_LIBRARY block is a static
  torch::detail::TorchLibraryInit whose constructor runs the block and whose
  destructor is registered with atexit. The library defines both (weak) and
  calls them through its PLT/GOT, so a definition loaded first, into the
  global scope, interposes: the stand-ins define them as no-ops, and
  nothing of PyTorch's registration (torch::Library, parseSchema, the
  schema objects and their layouts) ever runs.
- Every other symbol the library leaves undefined that no library of the
  process defines (taken from `nm -D` of the libraries given): a function
  that prints its name and aborts, or, for a data symbol (readelf's type
  OBJECT), a zeroed, aligned array. None is reached on the kernel path; if
  one were, the run stops loudly with its name.

It stops, with the reason, when the library is not the one this was checked
with: the wheel's version is not 1.5.1, the registration is not made
through interposable TorchLibraryInit calls, or a symbol to stand in for
is outside the PyTorch namespaces and libstdc++ (something new the kernels
might call).

    gen_standins.py --version-file VERSION_PY --library SO --lib-dir DIR --out FILE.c [PROVIDER.so...]
"""

import argparse
import os
import re
import subprocess
import sys

VERSION = "1.5.1"
INIT = "_ZN5torch6detail16TorchLibraryInit"
CTOR = INIT + "C1ENS_7Library4KindEPFvRS2_EPKcSt8optionalIN3c1011DispatchKeyEES8_j"
DTOR = INIT + "D1Ev"
# Namespaces checked with 1.5.1: PyTorch's (registration and the ATen
# variants) and libstdc++ newer than the system's.
KNOWN = re.compile(r"^_ZN[KOR]*(2at|3c10|5torch|6caffe2|St)|^_ZSt")


def stop(message):
    sys.exit("examples/executorch: gen_standins.py: " + message)


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version-file", required=True)
    ap.add_argument("--library", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lib-dir", required=True, help="the wheel's lib/")
    ap.add_argument("providers", nargs="*")
    a = ap.parse_args()

    version = re.search(r'__version__ = "([^"+]*)', open(a.version_file).read())
    if not version or version.group(1) != VERSION:
        stop(f"the wheel is executorch {version.group(1) if version else '?'}; the stand-ins were checked "
             f"with {VERSION} only (the custom-ops library's registration and undefined symbols)")

    # The library's dynamic symbols: name -> (type, binding, section index).
    symbols = {}
    for line in run("readelf", "--dyn-syms", "-W", a.library).splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[1] != "Value":
            symbols.setdefault(f[7].split("@")[0], (f[3], f[4], f[6]))
    for name in (CTOR, DTOR):
        if name not in symbols or symbols[name][2] == "UND" or symbols[name][1] != "WEAK":
            stop(f"{name} is not a weak definition of the library: its registration is not the one "
                 "the stand-ins make a no-op")
    relocs = run("readelf", "-r", "-W", a.library)
    if not re.search(r"JUMP_SLOT\s+\S+\s+" + re.escape(CTOR), relocs) or not re.search(
        r"GLOB_DAT\s+\S+\s+" + re.escape(DTOR), relocs
    ):
        stop("TorchLibraryInit's constructor or destructor is not called through the PLT/GOT: "
             "a definition loaded first would not interpose")
    # What defines symbols in the process: the libraries given (the runner's
    # own), and the library's NEEDED entries as the loader finds them, in
    # the wheel's lib/ or the system's cache; PyTorch's are found in neither.
    providers = list(a.providers)
    cache = {}
    for line in run("ldconfig", "-p").splitlines():
        m = re.match(r"\s*(\S+) \(libc6,x86-64[^)]*\) => (\S+)", line)
        if m:
            cache.setdefault(m.group(1), m.group(2))
    for needed in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", a.library)):
        path = os.path.join(a.lib_dir, needed)
        if os.path.exists(path):
            providers.append(path)
        elif needed in cache:
            providers.append(cache[needed])
    defined = set()
    for p in providers:
        for line in run("nm", "-D", "--defined-only", p).splitlines():
            f = line.split()
            if len(f) == 3:
                defined.add(f[2].split("@")[0])
    missing = sorted(
        n for n, (kind, bind, ndx) in symbols.items() if ndx == "UND" and bind != "WEAK" and n not in defined
    )
    unknown = [n for n in missing if not KNOWN.search(n)]
    if unknown:
        stop("the library asks for symbols outside PyTorch and libstdc++ that no loaded library defines, "
             "not checked with " + VERSION + ": " + " ".join(unknown))

    out = [
        "// Generated by examples/executorch/gen_standins.py from "
        + a.library.split("/")[-1]
        + "'s undefined symbols: do not edit.",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "",
        "// TORCH_LIBRARY registration: not run (see gen_standins.py).",
        f'void et_standin_init(void) __asm__("{CTOR}");',
        "void et_standin_init(void) {}",
        f'void et_standin_fini(void) __asm__("{DTOR}");',
        "void et_standin_fini(void) {}",
        "",
        "static void __attribute__((noreturn)) reached(const char* name) {",
        '  fprintf(stderr, "et_runner: error: the custom-ops library called %s, which has a stand-in only\\n", name);',
        "  abort();",
        "}",
        "",
    ]
    functions = data = 0
    for i, n in enumerate(missing):
        if symbols[n][0] == "OBJECT":
            out.append(f'char et_standin_d{i}[4096] __asm__("{n}") __attribute__((aligned(64)));')
            data += 1
        else:
            out.append(f'void et_standin_f{i}(void) __asm__("{n}");')
            out.append(f'void et_standin_f{i}(void) {{ reached("{n}"); }}')
            functions += 1
    out.append(f"// {functions} functions that abort, {data} data symbols, 2 no-ops.")
    open(a.out, "w").write("\n".join(out) + "\n")
    print(f"-- custom-ops stand-ins: {functions} aborting functions, {data} data symbols, 2 registration no-ops")


if __name__ == "__main__":
    main()
