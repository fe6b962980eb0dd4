#!/usr/bin/env bash
# Build the appliance's Debian package from this checkout:
#
#   bash systemd/build-deb.sh            ->  dist/bookie_<version>+b<UTC time>_<arch>.deb
#
# The version is pyproject.toml's (the project's one version) with a build suffix every later
# build sorts above (systemd/deb-version.sh), so installing a rebuild upgrades.
#
# What goes in it:
#   /usr/lib/bookie                      a virtual environment of Debian's python3.11 holding the
#                                    product and its dependencies (from PyPI, at build time)
#   /usr/bin/bookie                  -> /usr/lib/bookie/bin/bookie
#   /etc/bookie/bookie.conf          conffile, from systemd/bookie.conf.example
#   /lib/systemd/system/bookie.service
#   /usr/share/doc/bookie/           README.md, docs/*.md, docs/prometheus/alerts.yml, the
#                                    copyright file and the changelog
#   /usr/share/man/man1/bookie.1.gz  the man page, made from the command's own --help
#   /usr/share/lintian/overrides/bookie   why the /usr/lib/bookie environment is as it is
# and the maintainer scripts in systemd/debian/ (bookie user, /var/lib/bookie/{journal,ledgers},
# the embedded metadata store; remove keeps the data, purge deletes it).
#
# Why Debian's interpreter and not whatever python3 is first on PATH: the environment's
# extension modules (numpy, pyzmq, lmdb, orjson, crc32c) are built for one CPython minor
# version, and the target must have exactly that one. /usr/bin/python3.11 is bookworm's
# python3; the package depends on python3.11 by name. BOOKIE_DEB_PYTHON overrides it (an
# interpreter at the same path must then exist on every target).
#
# The modules bookie.compiled names are compiled (Cython, from their own Python source) by the
# build; the package ships them compiled and the build fails if one is not (BOOKIE_DEB_PURE=1:
# a package of plain modules, on purpose).
#
# Needs: dpkg-deb, python3.11 with its venv module (python3.11-venv), a C compiler and the
# interpreter's headers (gcc, python3.11-dev), and PyPI (Cython comes from it at build time).
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
python=${BOOKIE_DEB_PYTHON:-/usr/bin/python3.11}
prefix=/usr/lib/bookie

die() { echo "build-deb: $*" >&2; exit 1; }

command -v dpkg-deb >/dev/null || die "dpkg-deb not found (apt-get install dpkg)"
[ -x "$python" ] || die "$python not found (apt-get install python3.11)"
"$python" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$python has no venv module (apt-get install python3.11-venv)"
# Debian's package of that interpreter with its whole standard library (pythonX.Y, not the
# pythonX.Y-minimal that holds the binary).
python_package=python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
dpkg -s "$python_package" >/dev/null 2>&1 \
    || die "$python is not Debian's $python_package (apt-get install $python_package)"

version=$(bash "$src/systemd/deb-version.sh") || die "no version in pyproject.toml"
arch=$(dpkg --print-architecture)
# Who answers for the package (debian/control's Maintainer and the changelog's trailer).
maintainer=${BOOKIE_DEB_MAINTAINER:-Bookie appliance maintainers <bookie@packages.invalid>}

work=$(mktemp -d "${TMPDIR:-/tmp}/bookie-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
venv=$root$prefix

echo "build-deb: bookie $version ($arch) with $python ($python_package)"

# The source, copied: pip builds in the tree it is given, and this checkout stays clean.
mkdir -p "$work/src"
tar -C "$src" --exclude=./.git --exclude=./dist --exclude=./build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=./.venv --exclude='*.so' --exclude='*.c' -cf - . \
    | tar -C "$work/src" -xf -  # no in-place build of a checkout's venv: pip compiles anew

# The environment, built where it will not live, then moved: scripts' first lines and the
# activate scripts name the build path, rewritten below to /usr/lib/bookie.
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile \
    "$work/src"
built=$("$venv/bin/python" -c 'from bookie import compiled
print(len(compiled.COMPILED) - len(compiled.compiled_modules()), compiled.describe())')
echo "build-deb: ${built#* }"
if [ "${built%% *}" != 0 ] && [ "${BOOKIE_DEB_PURE:-}" != 1 ]; then
    die "not every module was compiled (${built#* }): install gcc and python3.11-dev, or set BOOKIE_DEB_PURE=1"
fi
# pip and setuptools are build tools: the appliance does not need them at run time.
"$venv/bin/python" -m pip uninstall --quiet --yes pip setuptools >/dev/null
rm -f "$venv"/bin/pip* "$venv"/bin/easy_install*
grep -rlI --null -- "$venv" "$venv/bin" "$venv/pyvenv.cfg" \
    | xargs -0 -r sed -i "s#$venv#$prefix#g"
# PEP 610's record of where the product was installed from names the build directory.
for record in "$venv"/lib/python*/site-packages/bookie-*.dist-info; do
    rm -f "$record/direct_url.json"
    sed -i '/direct_url\.json/d' "$record/RECORD"
done
# The dependencies' shared libraries are not executable. They are not stripped: the wheels'
# bundled libraries were rewritten by auditwheel (patchelf), and strip breaks their load
# commands ("ELF load command address/offset not page-aligned", numpy's OpenBLAS).
find "$venv" -type f \( -name '*.so' -o -name '*.so.*' \) -exec chmod 0644 {} +
# The newest C library symbol version they need: the package's libc6 dependency.
glibc=$(find "$venv" -type f \( -name '*.so' -o -name '*.so.*' \) -print0 \
    | xargs -0 -r objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' \
    | sort -uV | tail -n 1)
[ -n "$glibc" ] || die "no C library version found in the environment's objects"
# Bytecode now, recorded under its final path (tracebacks name /usr/lib/bookie/...): the service
# cannot write next to its modules (ProtectSystem=strict), so nothing is compiled at run time.
"$venv/bin/python" -m compileall -q -j 0 -s "$root" -p / "$venv/lib" >/dev/null
if grep -rlI -- "$work" "$venv/bin" "$venv/pyvenv.cfg"; then
    die "the build path is still named in the files above"
fi

install -d "$root/usr/bin" "$root/etc/bookie" "$root/lib/systemd/system" \
    "$root/usr/share/doc/bookie/prometheus" "$root/usr/share/man/man1" \
    "$root/usr/share/lintian/overrides"
ln -s "..${prefix#/usr}/bin/bookie" "$root/usr/bin/bookie"  # relative: both under /usr
install -m 0644 "$src/systemd/bookie.conf.example" "$root/etc/bookie/bookie.conf"
install -m 0644 "$src/systemd/bookie.service" "$root/lib/systemd/system/bookie.service"
install -m 0644 "$src/README.md" "$src"/docs/*.md "$root/usr/share/doc/bookie/"
install -m 0644 "$src/docs/prometheus/alerts.yml" "$root/usr/share/doc/bookie/prometheus/"
install -m 0644 "$src/systemd/debian/copyright" "$root/usr/share/doc/bookie/copyright"
sed -e "s/@VERSION@/$version/" -e "s/@MAINTAINER@/$maintainer/" \
    -e "s/@DATE@/$(date -u -R)/" "$src/systemd/debian/changelog.in" \
    | gzip -9n > "$root/usr/share/doc/bookie/changelog.gz"
chmod 0644 "$root/usr/share/doc/bookie/changelog.gz"
# The man page from the program's own help, as the installed program prints it.
(cd / && COLUMNS=80 "$venv/bin/python" -B "$src/systemd/manpage.py" "$version") \
    | gzip -9n > "$root/usr/share/man/man1/bookie.1.gz"
chmod 0644 "$root/usr/share/man/man1/bookie.1.gz"
install -m 0644 "$src/systemd/debian/lintian-overrides" "$root/usr/share/lintian/overrides/bookie"
# The environment's link to its interpreter made relative, as links within /usr are (Debian
# policy 10.5), now that nothing here runs the environment's python any more.
for link in "$venv"/bin/python*; do
    target=$(readlink "$link")
    case $target in
    /usr/*) ln -sfn "$(realpath -m --relative-to="$prefix/bin" "$target")" "$link" ;;
    esac
done

install -d -m 0755 "$root/DEBIAN"
install -m 0644 "$src/systemd/debian/conffiles" "$root/DEBIAN/conffiles"
install -m 0755 "$src/systemd/debian/postinst" "$src/systemd/debian/prerm" \
    "$src/systemd/debian/postrm" "$root/DEBIAN/"
installed_kb=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@PYTHON_PACKAGE@/$python_package/" \
    -e "s/@INSTALLED_SIZE@/$installed_kb/" -e "s/@MAINTAINER@/$maintainer/" \
    -e "s/@GLIBC@/$glibc/" \
    "$src/systemd/debian/control.in" \
    > "$root/DEBIAN/control"

mkdir -p "$src/dist"
deb=$src/dist/bookie_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "build-deb: $deb ($(du -h "$deb" | cut -f1))"
