#!/usr/bin/env bash
# The Rust checks CI adds to the tests: formatting, clippy with warnings as errors, and a
# `cargo check` at the declared rust-version (Cargo.toml `rust-version`), so that the
# claim stays true. Installs the components and the toolchain it needs through rustup.
#
#   scripts/lint.sh              # all of it
#   scripts/lint.sh --no-msrv    # without the rust-version check
#   scripts/lint.sh --msrv-only  # only it (scripts/test.sh runs it beside the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-all}"
case "$mode" in
    all | --no-msrv | --msrv-only) ;;
    *) echo "usage: scripts/lint.sh [--no-msrv | --msrv-only]" >&2; exit 2 ;;
esac

have_rustup=false
command -v rustup >/dev/null 2>&1 && have_rustup=true
if $have_rustup; then
    # The active toolchain's rustfmt and clippy (a minimal profile lacks them).
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi

if [ "$mode" != --msrv-only ]; then
    echo "== cargo fmt --check"
    cargo fmt --all --check
    # fuzz/ is its own workspace with its own lock file, which a new dependency of the daemon
    # leaves stale; the fuzz run (--locked) would then fail at the end of CI, not here.
    echo "== fuzz/Cargo.lock is current"
    cargo metadata --format-version 1 --locked --manifest-path fuzz/Cargo.toml >/dev/null
    echo "== cargo clippy (warnings are errors)"
    cargo clippy --workspace --all-targets --locked -- -D warnings
fi
[ "$mode" = --no-msrv ] && exit 0

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)
echo "== cargo check at rust-version $msrv"
if $have_rustup; then
    rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal
    # Its own target directory: the tests run the current toolchain's binaries.
    cargo "+$msrv" check --workspace --all-targets --locked --target-dir target/msrv
else
    echo "rustup not found: cannot install Rust $msrv for the rust-version check" >&2
    exit 1
fi
