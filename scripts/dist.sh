#!/usr/bin/env bash
# Builds every release artefact of hanzo-dev into dist/, with SHA-256 sums (dist/SHA256SUMS):
#
#   hanzo-dev-VERSION-x86_64-unknown-linux-gnu      the glibc binary (profile `dist`: fat LTO, one
#   hanzo-dev-VERSION-x86_64-unknown-linux-musl     codegen unit, symbols stripped) and the static
#   *.dwp                                           musl binary, with their split debug info
#   hanzo-dev-VERSION.tgz                           npm @hanzo/dev (the JS launcher)
#   hanzo-dev-linux-x64-{gnu,musl}-VERSION.tgz      npm @hanzo/dev-linux-x64-{gnu,musl} (binaries)
#   hanzo-repl-VERSION.tgz                          npm @hanzo/repl (deprecation shim)
#   hanzo_dev-VERSION-py3-none-manylinux_*.whl      PyPI hanzo-dev (maturin, bindings = "bin")
#   hanzo_dev-VERSION-py3-none-musllinux_*.whl
#   hanzo_repl-VERSION-py3-none-any.whl             PyPI hanzo-repl (deprecation shim)
#   hanzo-dev_VERSION-1_amd64.deb                   Debian package (cargo-deb): binary,
#                                                   completions, man pages, systemd unit
#   completions/, man/                              generated from the CLI definition
#
# Installs the tools it needs when missing (scripts/setup-dist.sh: musl-tools, maturin,
# cargo-deb). Prints each artefact's size. `scripts/test-dist.sh` then proves each one installs
# and runs, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/dist"
gnu=x86_64-unknown-linux-gnu
musl=x86_64-unknown-linux-musl

say() { printf 'dist: %s\n' "$*"; }

# ---- tools ----
./scripts/setup-dist.sh

version=$(cargo metadata --no-deps --format-version 1 --locked |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "hanzo-dev"))')
say "version $version"
rm -rf "$out"
mkdir -p "$out"

# ---- binaries ----
# The musl build has a target directory of its own so that both can build at once: most of a
# fat-LTO build is its final, single-threaded link, while the other target compiles.
musl_target_dir="$root/target/musl"
build() {
    local target=$1 dir=$2 log="$root/target/dist-$1.log"
    say "building $target (profile dist; log in target/dist-$target.log)"
    if ! CARGO_TARGET_DIR="$dir" CC_x86_64_unknown_linux_musl=musl-gcc \
        cargo build --locked --profile dist -p hanzo-dev --target "$target" >"$log" 2>&1; then
        tail -30 "$log" >&2
        echo "dist: the $target build failed (whole log: $log)" >&2
        return 1
    fi
    cp "$dir/$target/dist/hanzo-dev" "$out/hanzo-dev-$version-$target"
    if [ -f "$dir/$target/dist/hanzo-dev.dwp" ]; then
        cp "$dir/$target/dist/hanzo-dev.dwp" "$out/hanzo-dev-$version-$target.dwp"
    fi
}
mkdir -p "$root/target"
build "$gnu" "$root/target" &
gnu_build=$!
build "$musl" "$musl_target_dir" &
musl_build=$!
status=0
wait "$gnu_build" || status=1
wait "$musl_build" || status=1
[ "$status" = 0 ] || exit 1
# cargo-deb's `target/release/hanzo-dev` asset path maps onto the profile and target it is given.
bin="$out/hanzo-dev-$version-$gnu"

# ---- completions and man pages, from the CLI definition ----
assets="$root/target/dist-assets"
rm -rf "$assets"
mkdir -p "$assets/completions" "$assets/man"
"$bin" completions bash >"$assets/completions/hanzo-dev.bash"
"$bin" completions zsh >"$assets/completions/_hanzo-dev"
"$bin" completions fish >"$assets/completions/hanzo-dev.fish"
"$bin" man --dir "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1
cp -r "$assets/completions" "$assets/man" "$out/"

# ---- npm ----
stage="$root/target/dist-npm"
rm -rf "$stage"
mkdir -p "$stage"
npm_platform() {
    local key=$1 cpu=$2 libc=$3 binary=$4
    local dir="$stage/dev-$key"
    mkdir -p "$dir/bin"
    sed -e "s/@KEY@/$key/g" -e "s/@VERSION@/$version/g" -e "s/@OS@/linux/g" \
        -e "s/@CPU@/$cpu/g" -e "s/@LIBC@/$libc/g" packaging/npm/platform/package.json.in >"$dir/package.json"
    install -m 0755 "$binary" "$dir/bin/hanzo-dev"
    (cd "$dir" && npm pack --silent --pack-destination "$out" >/dev/null)
}
npm_platform linux-x64-gnu x64 glibc "$out/hanzo-dev-$version-$gnu"
npm_platform linux-x64-musl x64 musl "$out/hanzo-dev-$version-$musl"
cp -r packaging/npm/dev "$stage/dev"
cp -r packaging/npm/repl "$stage/repl"
python3 - "$stage" "$version" <<'EOF'
import json, sys
stage, version = sys.argv[1], sys.argv[2]
def edit(path, f):
    with open(path) as fh:
        data = json.load(fh)
    f(data)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
def dev(d):
    d["version"] = version
    # Only the platforms built here; the launcher names the others when none matches.
    d["optionalDependencies"] = {f"@hanzo/dev-{k}": version for k in ("linux-x64-gnu", "linux-x64-musl")}
def repl(d):
    d["version"] = version
    d["dependencies"]["@hanzo/dev"] = version
edit(f"{stage}/dev/package.json", dev)
edit(f"{stage}/repl/package.json", repl)
EOF
(cd "$stage/dev" && npm pack --silent --pack-destination "$out" >/dev/null)
(cd "$stage/repl" && npm pack --silent --pack-destination "$out" >/dev/null)

# ---- PyPI ----
for target in "$gnu" "$musl"; do
    say "building the $target wheel (maturin)"
    # A static musl binary needs no libc, so maturin would tag it manylinux; pip on a musl
    # system (Alpine) accepts only musllinux tags: ask for that one.
    compat=()
    if [ "$target" = "$musl" ]; then compat=(--compatibility musllinux_1_2); fi
    (cd packaging/pypi/hanzo-dev &&
        if [ "$target" = "$musl" ]; then export CARGO_TARGET_DIR="$musl_target_dir"; fi
        CC_x86_64_unknown_linux_musl=musl-gcc maturin build --locked --target "$target" \
            "${compat[@]}" --out "$out" -q)
done
python3 packaging/pypi/hanzo-repl/build_wheel.py "$version" "$out" >/dev/null

# ---- Debian ----
say "building the Debian package (cargo-deb)"
cargo deb --locked --no-build --no-strip -p hanzo-dev --profile dist --target "$gnu" --output "$out" >/dev/null

# ---- sums and sizes ----
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs sha256sum >SHA256SUMS)
say "artefacts in dist/ (sizes):"
(cd "$out" && find . -maxdepth 1 -type f -printf '%s\t%f\n' | sort -k2 |
    awk -F'\t' '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, $2 }')
