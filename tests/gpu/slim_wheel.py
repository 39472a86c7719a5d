"""`python tests/gpu/slim_wheel.py WHEEL PREFIX KEEP...`: rewrite a wheel in place without the native libraries named
PREFIX* other than KEEP, its RECORD rewritten for the files that stay (tests/gpu/device_wheels.sh).

bitsandbytes' wheel carries one library per CUDA, ROCm and XPU version (125 MiB unpacked), more than the 64 MiB that
travel to the lent GPU; its torch (cu130 there, docs/gpu_check/results.json) makes bitsandbytes load
libbitsandbytes_cuda130.so, and the CPU one is its fallback.
"""
import base64
import hashlib
import os
import sys
import zipfile
from typing import List, Sequence


def slim(path: str, prefix: str, keep: Sequence[str]) -> List[str]:
    """The names dropped (none when the wheel is slim already)."""
    dropped, rows, tmp = [], [], path + ".tmp"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            base = os.path.basename(info.filename)
            if base.startswith(prefix) and base not in keep:
                dropped.append(info.filename)
                continue
            if info.filename == record:
                continue
            data = src.read(info)
            dst.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{info.filename},sha256={digest},{len(data)}")
        dst.writestr(record, "\n".join([*rows, f"{record},,"]) + "\n")
    os.replace(tmp, path)
    return dropped


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: python tests/gpu/slim_wheel.py WHEEL PREFIX KEEP...")
    gone = slim(sys.argv[1], sys.argv[2], sys.argv[3:])
    print(f"{os.path.basename(sys.argv[1])}: {len(gone)} libraries dropped, kept {' '.join(sys.argv[3:])}")
