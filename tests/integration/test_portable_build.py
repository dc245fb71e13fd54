"""The installed llama.cpp is a portable build: no AMX or AVX-512 code that faults or traps on other x86-64 CPUs.

A ``-march=native`` build (llama.cpp's default, or a native wheel reused from pip's cache) runs
on the machine that built it and crashes on a VM that advertises AMX but faults on it, or on an
AVX2-only CPU. So this suite, and with it CI, cannot pass on such a build, whatever CPU runs it.
"""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from models.llama import probe as local_probe

pytestmark = pytest.mark.integration

# AMX tile instructions, and any use of AVX-512's zmm registers or opmask registers.
NON_PORTABLE = re.compile(
    r"\b(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilerelease|tilezero|tdp\w+)\b|%zmm\d|%k[1-7]\b"
)


@pytest.fixture(scope="module")
def libraries() -> list[Path]:
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the portability check reads x86-64 code; this is {platform.machine()}")
    lib_dir = local_probe._llama_lib_dir()
    assert lib_dir is not None, "llama-cpp-python is not installed: pip install -e '.[test]'"
    found: dict[str, Path] = {}  # each library once: pip installs its versioned names as copies, not links
    for p in sorted(lib_dir.glob("*.so*"), key=lambda p: len(p.name)):
        if p.is_file():
            found.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), p)
    assert found, f"no shared libraries in {lib_dir}"
    return sorted(found.values())


def test_llama_cpp_reports_no_amx_or_avx512_features():
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    enabled = {name for name, value in re.findall(r"(\w+) = (\d)", info) if value == "1"}
    assert not {f for f in enabled if f.startswith(("AMX", "AVX512"))}, (
        f"llama.cpp was built with {sorted(enabled)}: rebuild with {local_probe.reinstall_command()}"
    )


def test_no_amx_or_avx512_instructions_in_the_shared_libraries(libraries: list[Path]):
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed: cannot disassemble llama.cpp's libraries")
    for lib in libraries:
        code = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True
        ).stdout
        hits = sorted({m.group(0) for m in NON_PORTABLE.finditer(code)})
        assert not hits, (
            f"{lib.name} contains {hits[:8]}: rebuild llama-cpp-python with {local_probe.reinstall_command()}"
        )
