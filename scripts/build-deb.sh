#!/usr/bin/env bash
# Builds the Debian package of rtrack and checks it:
#
#   1. release binaries (rtrackd, rtrackctl, rtrack-gen-assets);
#   2. man pages (rtrackd.8, rtrackctl.1 and one per rtrackctl command) and shell completions
#      into target/assets (rtrack-gen-assets);
#   3. cargo-deb into target/tools, built beside step 1, unless the pinned version is there;
#   4. the .deb into target/debian (cargo deb --no-build: no second build);
#   5. checks of the .deb: every expected path and mode, the conffile, the maintainer
#      scripts, the packaged unit and configuration against packaging/, the changelog version,
#      `systemd-analyze verify` of the unit when systemd-analyze is installed, and lintian
#      (any error fails; warnings are printed).
#
# Needs: cargo, dpkg-deb, lintian (Debian: apt-get install --no-install-recommends lintian).
# Environment: CARGO_DEB_VERSION (default 3.8.0), CARGO_BUILD_JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
ASSETS=$ROOT/target/assets # Cargo.toml's [package.metadata.deb] assets point here
TOOLS=$ROOT/target/tools
CARGO_DEB_VERSION=${CARGO_DEB_VERSION:-3.8.0}
START=$SECONDS
PASSED=0

step() { echo "== build-deb: $* ($((SECONDS - START)) s)"; }
fail() {
    echo "build-deb: FAILED: $*" >&2
    echo "build-deb: $PASSED passed, 1 failed"
    exit 1
}
ok() {
    PASSED=$((PASSED + 1))
    echo "  ok: $*"
}

for tool in cargo dpkg-deb lintian; do
    command -v "$tool" >/dev/null || fail "$tool is not installed (Debian: apt-get install -y --no-install-recommends ${tool/dpkg-deb/dpkg})"
done

CARGO_DEB=$TOOLS/bin/cargo-deb
deb_install=
if [ -x "$CARGO_DEB" ] && [ "$("$CARGO_DEB" --version)" = "cargo-deb $CARGO_DEB_VERSION" ]; then
    step "cargo-deb $CARGO_DEB_VERSION already in ${TOOLS#"$ROOT"/}"
else
    # Beside the release build: each build ends on one crate and one link at a time, and the
    # other fills the second core meanwhile. Its own temporary target directory, not ours
    # (CARGO_TARGET_DIR would be shared); its output in a log, shown when it fails.
    step "installing cargo-deb $CARGO_DEB_VERSION into ${TOOLS#"$ROOT"/} (in the background)"
    mkdir -p "$TOOLS"
    env -u CARGO_TARGET_DIR cargo install --quiet cargo-deb --version "=$CARGO_DEB_VERSION" \
        --locked --root "$TOOLS" >"$TOOLS/install.log" 2>&1 &
    deb_install=$!
fi

step "release build"
cargo build --release --locked -p rtrack -p rtrack-assets --bins

step "man pages and completions -> ${ASSETS#"$ROOT"/}"
rm -rf "$ASSETS"
"$TARGET_DIR/release/rtrack-gen-assets" "$ASSETS"

if [ -n "$deb_install" ]; then
    step "waiting for cargo-deb's install"
    wait "$deb_install" || { tail -n 30 "$TOOLS/install.log" >&2; fail "cargo install cargo-deb $CARGO_DEB_VERSION failed (log: $TOOLS/install.log)"; }
fi

step "cargo deb --no-build"
CHECK=$ROOT/target/deb-check # scratch space of the checks
rm -rf "$ROOT/target/debian" "$CHECK"
mkdir -p "$CHECK"
# --strip: the release profile keeps line tables for backtraces; the package does not.
"$CARGO_DEB" --no-build --strip --locked -p rtrack --output "$ROOT/target/debian/" | tee "$CHECK/cargo-deb.out"
DEB=$(tail -n 1 "$CHECK/cargo-deb.out")
[ -f "$DEB" ] || fail "cargo deb did not report the .deb it wrote (got: $DEB)"
ok "built ${DEB#"$ROOT"/} ($(stat -c %s "$DEB") bytes)"

step "checking the package"
dpkg-deb --info "$DEB"
LISTING=$(dpkg-deb --contents "$DEB")
echo "$LISTING"

# path, mode (as dpkg-deb -c prints it)
EXPECTED=(
    "./usr/bin/rtrackd -rwxr-xr-x"
    "./usr/bin/rtrackctl -rwxr-xr-x"
    "./usr/lib/systemd/system/rtrackd.service -rw-r--r--"
    "./etc/rtrack/rtrack.toml -rw-r-----"
    "./usr/share/man/man8/rtrackd.8.gz -rw-r--r--"
    "./usr/share/man/man1/rtrackctl.1.gz -rw-r--r--"
    "./usr/share/bash-completion/completions/rtrackd -rw-r--r--"
    "./usr/share/bash-completion/completions/rtrackctl -rw-r--r--"
    "./usr/share/zsh/vendor-completions/_rtrackd -rw-r--r--"
    "./usr/share/zsh/vendor-completions/_rtrackctl -rw-r--r--"
    "./usr/share/fish/vendor_completions.d/rtrackd.fish -rw-r--r--"
    "./usr/share/fish/vendor_completions.d/rtrackctl.fish -rw-r--r--"
    "./usr/share/doc/rtrack/copyright -rw-r--r--"
    "./usr/share/doc/rtrack/changelog.Debian.gz -rw-r--r--"
    "./usr/share/lintian/overrides/rtrack -rw-r--r--"
    "./usr/share/rtrack/monitoring/rtrack-alerts.yml -rw-r--r--"
    "./usr/share/rtrack/monitoring/rtrack-alerts.test.yml -rw-r--r--"
    "./usr/share/rtrack/monitoring/rtrack-dashboard.json -rw-r--r--"
)
for entry in "${EXPECTED[@]}"; do
    path=${entry% *}
    mode=${entry##* }
    line=$(awk -v p="$path" '$6 == p' <<<"$LISTING")
    [ -n "$line" ] || fail "$path is not in the package"
    [ "$(awk '{print $1}' <<<"$line")" = "$mode" ] || fail "$path: mode is not $mode: $line"
    owner=$(awk '{print $2}' <<<"$line")
    case "$owner" in 0/0 | root/root) ;; *) fail "$path: owner is $owner, not root" ;; esac
done
ok "${#EXPECTED[@]} files in place with their modes, owned by root"
# One page per rtrackctl command (rtrackctl.1 names them): as many as were generated.
generated=$(find "$ASSETS/man" -name 'rtrackctl-*.1' | wc -l)
packaged=$(grep -c '\./usr/share/man/man1/rtrackctl-.*\.1\.gz$' <<<"$LISTING" || true)
[ "$generated" -gt 0 ] && [ "$packaged" -eq "$generated" ] ||
    fail "$packaged rtrackctl-COMMAND.1.gz pages packaged, $generated generated"
ok "$packaged rtrackctl-COMMAND.1 pages, gzipped"

CONFFILES=$(dpkg-deb --info "$DEB" conffiles)
[ "$CONFFILES" = "/etc/rtrack/rtrack.toml" ] || fail "conffiles is not exactly /etc/rtrack/rtrack.toml: $CONFFILES"
ok "conffiles: /etc/rtrack/rtrack.toml"

POSTINST=$(dpkg-deb --info "$DEB" postinst)
grep -q 'addgroup --system --quiet rtrack' <<<"$POSTINST" || fail "postinst does not create the group rtrack"
grep -q 'deb-systemd-helper enable rtrackd.service' <<<"$POSTINST" || fail "postinst does not enable rtrackd.service"
grep -q 'deb-systemd-invoke $_dh_action .*rtrackd.service' <<<"$POSTINST" || fail "postinst does not start rtrackd.service"
group_line=$(grep -n 'addgroup' <<<"$POSTINST" | head -n 1 | cut -d: -f1)
start_line=$(grep -n 'deb-systemd-invoke' <<<"$POSTINST" | head -n 1 | cut -d: -f1)
[ "$group_line" -lt "$start_line" ] || fail "postinst starts rtrackd before it creates the group"
ok "postinst creates the group rtrack, then enables and starts rtrackd.service"
for script in postinst prerm postrm; do
    text=$(dpkg-deb --info "$DEB" "$script") || fail "no $script in the package"
    if grep -q '#DEBHELPER#' <<<"$text"; then fail "$script still has the #DEBHELPER# token"; fi
    sh -n <<<"$text" || fail "$script is not valid sh"
done
grep -q 'deb-systemd-invoke stop .*rtrackd.service' <<<"$(dpkg-deb --info "$DEB" prerm)" || fail "prerm does not stop rtrackd.service"
grep -q 'rm -rf /var/lib/rtrack' <<<"$(dpkg-deb --info "$DEB" postrm)" || fail "postrm does not remove the state on purge"
ok "prerm stops the service, postrm purges the state; the scripts are valid sh"

EXTRACT=$CHECK/root # the package unpacked
mkdir -p "$EXTRACT"
dpkg-deb --extract "$DEB" "$EXTRACT"
cmp "$EXTRACT/usr/lib/systemd/system/rtrackd.service" packaging/rtrackd.service || fail "the packaged unit differs from packaging/rtrackd.service"
cmp "$EXTRACT/etc/rtrack/rtrack.toml" packaging/rtrack.toml || fail "the packaged configuration differs from packaging/rtrack.toml"
ok "packaged unit and configuration are packaging/rtrackd.service and packaging/rtrack.toml"
for page in man8/rtrackd.8 man1/rtrackctl.1; do
    gzip -t "$EXTRACT/usr/share/man/$page.gz" || fail "$page.gz is not gzip"
    zcat "$EXTRACT/usr/share/man/$page.gz" | grep -q '^\.TH ' || fail "$page has no .TH line"
done
ok "man pages are gzipped roff"
if command -v file >/dev/null; then
    for bin in rtrackd rtrackctl; do
        file "$EXTRACT/usr/bin/$bin" | grep -q ', stripped' || fail "usr/bin/$bin is not stripped"
    done
    ok "binaries are stripped"
else
    echo "  skipped: stripped binaries (file is not installed; lintian checks it too)"
fi

VERSION=$(dpkg-deb --field "$DEB" Version)
CHANGELOG_VERSION=$(sed -n '1s/^rtrack (\([^)]*\)).*/\1/p' packaging/debian/changelog)
[ "$VERSION" = "$CHANGELOG_VERSION" ] || fail "package version $VERSION but packaging/debian/changelog starts with $CHANGELOG_VERSION: add a changelog entry"
ok "version $VERSION matches packaging/debian/changelog"

if command -v systemd-analyze >/dev/null; then
    # The unit names /usr/bin/rtrackd, which is there only once the package is installed:
    # that one complaint is expected; any other line is a problem.
    VERIFY=$(systemd-analyze verify --man=no "$EXTRACT/usr/lib/systemd/system/rtrackd.service" 2>&1 || true)
    [ -z "$VERIFY" ] || echo "$VERIFY" | sed 's/^/  systemd-analyze: /'
    PROBLEMS=$(grep -v '^$' <<<"$VERIFY" | grep -v 'Command /usr/bin/rtrackd is not executable' || true)
    if [ -x /usr/bin/rtrackd ]; then PROBLEMS=$VERIFY; fi
    [ -z "$PROBLEMS" ] || fail "systemd-analyze verify found problems in rtrackd.service"
    ok "systemd-analyze verify: no problem in rtrackd.service"
else
    echo "  skipped: systemd-analyze verify (systemd-analyze is not installed)"
fi

step "lintian"
set +e
# Shown overridden tags count for --fail-on (an overridden error would fail the run): the
# verdict comes from a run without --show-overrides, the listing from one with it.
lintian --fail-on error "$DEB" >/dev/null 2>&1
LINTIAN_RC=$?
LINTIAN_OUT=$(lintian --display-info --show-overrides "$DEB" 2>&1)
set -e
echo "${LINTIAN_OUT:-(no tags)}"
errors=$(grep -c '^E: ' <<<"$LINTIAN_OUT" || true)
warnings=$(grep -c '^W: ' <<<"$LINTIAN_OUT" || true)
overridden=$(grep -c '^O: ' <<<"$LINTIAN_OUT" || true)
[ "$LINTIAN_RC" -eq 0 ] && [ "$errors" -eq 0 ] || fail "lintian: $errors error(s) (exit $LINTIAN_RC)"
ok "lintian: 0 errors, $warnings warning(s), $overridden overridden (packaging/lintian-overrides)"

step "done: $DEB"
echo "build-deb: $PASSED passed, 0 failed"
