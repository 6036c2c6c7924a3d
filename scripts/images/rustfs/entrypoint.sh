#!/bin/sh
# Entrypoint of rustfs-vllm/rustfs:<version>-local (written for this project; it follows the
# behaviour of the official RustFS image's entrypoint as documented in ../shared/DESIGN.md):
# - credentials: RUSTFS_ACCESS_KEY / RUSTFS_SECRET_KEY, or the files named by RUSTFS_ACCESS_KEY_FILE /
#   RUSTFS_SECRET_KEY_FILE (read by RustFS itself). Neither set: a warning, and RustFS falls back to its
#   built-in default credentials. A value and a file that disagree, an empty value, or a file that
#   cannot be read: exit 1.
# - volumes: every local path in RUSTFS_VOLUMES (separated by spaces, commas or tabs) is created.
set -eu

check_pair() {  # NAME: the variable and its _FILE form
  name="$1"
  eval "value=\${$name-}"
  eval "set_value=\${$name+x}"
  eval "file=\${${name}_FILE-}"
  if [ -n "$file" ]; then
    if [ ! -r "$file" ]; then
      echo "entrypoint: ${name}_FILE=$file cannot be read by $(id -un) (uid $(id -u))" >&2
      exit 1
    fi
    if [ ! -s "$file" ]; then
      echo "entrypoint: ${name}_FILE=$file is empty" >&2
      exit 1
    fi
    if [ -n "$set_value" ] && [ "$value" != "$(cat "$file")" ]; then
      echo "entrypoint: $name and ${name}_FILE are both set and differ" >&2
      exit 1
    fi
  elif [ -n "$set_value" ] && [ -z "$value" ]; then
    echo "entrypoint: $name is set but empty" >&2
    exit 1
  elif [ -z "$set_value" ]; then
    echo "entrypoint: WARNING: $name or ${name}_FILE is not set; RustFS falls back to its built-in default credential" >&2
  fi
}
check_pair RUSTFS_ACCESS_KEY
check_pair RUSTFS_SECRET_KEY

for vol in $(echo "${RUSTFS_VOLUMES:-/data}" | tr ',\t' '  '); do
  case "$vol" in
    /*) mkdir -p "$vol" ;;
    *) ;;   # URLs of other nodes
  esac
done
[ -z "${RUSTFS_OBS_LOG_DIRECTORY:-}" ] || mkdir -p "$RUSTFS_OBS_LOG_DIRECTORY"
exec "$@"
