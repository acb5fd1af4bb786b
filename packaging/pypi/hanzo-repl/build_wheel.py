#!/usr/bin/env python3
"""Builds the `hanzo-repl` deprecation shim wheel (pure Python, any platform) without a build
backend, so that it works offline: `build_wheel.py VERSION OUT_DIR`. The wheel's `hanzo-repl`
script says the package was renamed and runs `hanzo-dev` (which the `hanzo-dev` wheel provides)."""
import base64
import hashlib
import os
import sys
import zipfile

SHIM = '''"""hanzo-repl was renamed to hanzo-dev (HIP-0301 section 17)."""
import os
import shutil
import sys
import sysconfig


def main():
    if not os.environ.get("HANZO_REPL_NO_DEPRECATION"):
        sys.stderr.write(
            "hanzo-repl is deprecated: it is now hanzo-dev (pip install hanzo-dev). "
            "Running hanzo-dev.\\n"
        )
    # The hanzo-dev script this environment installed (beside this one, in a virtualenv that
    # is not activated, and so not on PATH), else the one on PATH.
    scripts = sysconfig.get_path("scripts")
    beside = os.path.join(scripts, "hanzo-dev") if scripts else None
    exe = beside if beside and os.access(beside, os.X_OK) else shutil.which("hanzo-dev")
    if exe is None:
        sys.stderr.write("hanzo-repl: hanzo-dev is not on PATH; pip install hanzo-dev\\n")
        return 2
    os.execv(exe, [exe] + sys.argv[1:])
'''


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    version, out = sys.argv[1], sys.argv[2]
    dist_info = f"hanzo_repl-{version}.dist-info"
    files = {
        "hanzo_repl/__init__.py": SHIM.encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\n"
            "Name: hanzo-repl\n"
            f"Version: {version}\n"
            "Summary: Deprecated: renamed to hanzo-dev. This shim runs hanzo-dev.\n"
            "License: Apache-2.0\n"
            f"Requires-Dist: hanzo-dev=={version}\n"
            "Requires-Python: >=3.8\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: hanzo-dev build_wheel.py\n"
            "Root-Is-Purelib: true\nTag: py3-none-any\n"
        ).encode(),
        f"{dist_info}/entry_points.txt": b"[console_scripts]\nhanzo-repl = hanzo_repl:main\n",
    }
    path = os.path.join(out, f"hanzo_repl-{version}-py3-none-any.whl")
    records = [record_line(n, d) for n, d in files.items()]
    records.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(records) + "\n").encode()
    # Fixed timestamps: the same inputs give the same bytes.
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    print(path)


if __name__ == "__main__":
    main()
