#!/usr/bin/env bash
# Builds a PostgreSQL 15 container image from the PostgreSQL server installed
# on this machine (Debian's postgresql-15 package), for hosts that have Docker
# but no access to a container registry.
#
#   scripts/postgres-image.sh [IMAGE]      # default: backfill/postgres:15
#
# The image behaves like the official `postgres` image for the parts tests
# use: POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB on first start, a
# temporary init server that logs "ready to accept connections" on stdout,
# then the real server (logging on stderr) listening on 5432. Arguments are
# passed to `postgres` (e.g. `-c fsync=off`). With POSTGRES_SSL_CERT and
# POSTGRES_SSL_KEY (PEM text) on first start, the server also speaks TLS.
#
# IMAGE_VERSION is stamped on the image as a label; the tests and CI rebuild
# an image whose label is older.
set -euo pipefail
IMAGE_VERSION=2

image="${1:-${BACKFILL_PG_IMAGE:-backfill/postgres}:${BACKFILL_PG_TAG:-15}}"
pg_bin=/usr/lib/postgresql/15/bin
pg_lib=/usr/lib/postgresql/15/lib
pg_share=/usr/share/postgresql/15

if [[ ! -x "$pg_bin/postgres" ]]; then
    echo "postgres-image: $pg_bin/postgres not found; install Debian's postgresql-15 package" >&2
    exit 1
fi

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

copy() { # copy files (following symlinks) into the image root at the same paths
    local f
    for f in "$@"; do
        mkdir -p "$root$(dirname "$f")"
        cp -L "$f" "$root$f"
    done
}

libs_of() { # the shared libraries a binary loads, as absolute paths
    ldd "$@" 2>/dev/null | awk '/=> \// { print $3 } /^\s*\/lib/ { print $1 }' | sort -u
}

# The server, minus the LLVM JIT (hundreds of MB; the image runs with jit=off).
mkdir -p "$root$pg_bin" "$root$pg_lib"
cp -L "$pg_bin"/{postgres,initdb,pg_ctl,pg_isready,psql} "$root$pg_bin/"
find "$pg_lib" -maxdepth 1 -name '*.so' ! -name 'llvmjit*' -exec cp -L {} "$root$pg_lib/" \;
mkdir -p "$root/usr/share/postgresql"
cp -rL "$pg_share" "$root/usr/share/postgresql/"
mkdir -p "$root/usr/share"
cp -rL /usr/share/zoneinfo "$root/usr/share/"

# A shell and the few tools the entrypoint uses, with every library they load.
tools=(/bin/dash /bin/mkdir /bin/chmod /bin/cat /bin/rm)
copy "${tools[@]}"
ln -s dash "$root/bin/sh"
mapfile -t libs < <(libs_of "$pg_bin"/{postgres,initdb,pg_ctl,pg_isready,psql} "$root$pg_lib"/*.so "${tools[@]}")
copy "${libs[@]}"
copy /lib64/ld-linux-x86-64.so.2

mkdir -p "$root/etc"
cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
postgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh
PASSWD
cat > "$root/etc/group" <<'GROUP'
root:x:0:
postgres:x:999:
GROUP

cat > "$root/entrypoint.sh" <<'ENTRY'
#!/bin/sh
set -e
PATH=/usr/lib/postgresql/15/bin:/bin
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
export PATH PGDATA

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    if [ -n "$POSTGRES_PASSWORD" ]; then
        printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
        initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \
            --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C
        rm -f /tmp/pwfile
        echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    else
        initdb -D "$PGDATA" -U "$POSTGRES_USER" --auth=trust --encoding=UTF8 --locale=C
        echo "host all all all trust" >> "$PGDATA/pg_hba.conf"
    fi
    echo "jit = off" >> "$PGDATA/postgresql.conf"
    if [ -n "$POSTGRES_SSL_CERT" ] && [ -n "$POSTGRES_SSL_KEY" ]; then
        printf '%s\n' "$POSTGRES_SSL_CERT" > "$PGDATA/server.crt"
        printf '%s\n' "$POSTGRES_SSL_KEY" > "$PGDATA/server.key"
        chmod 600 "$PGDATA/server.key"
        echo "ssl = on" >> "$PGDATA/postgresql.conf"
    fi
    if [ "$POSTGRES_DB" != "postgres" ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\";" | postgres --single -D "$PGDATA" -j postgres > /dev/null
    fi
    # A temporary server, as the official image runs for its init scripts;
    # its log (with "ready to accept connections") goes to stdout.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    pg_ctl -D "$PGDATA" -m fast -w stop
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
ENTRY
chmod 755 "$root/entrypoint.sh"

mkdir -p "$root/tmp" "$root/var/lib/postgresql" "$root/var/run/postgresql" "$root/root"
find "$root" -type d -exec chmod 755 {} +
chmod 1777 "$root/tmp"
chown -R 999:999 "$root/var/lib/postgresql" "$root/var/run/postgresql"

tar -C "$root" -c . | docker import \
    -c 'USER postgres' \
    -c 'ENV PGDATA=/var/lib/postgresql/data' \
    -c 'ENTRYPOINT ["/entrypoint.sh"]' \
    -c 'EXPOSE 5432' \
    -c "LABEL backfill.image.version=$IMAGE_VERSION" \
    - "$image" > /dev/null
echo "postgres-image: built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
