#!/usr/bin/env bash
# Installs the torch engine into a private virtual environment, .local/engine-venv, from pip's
# configured index (never a system-wide install), then writes the tiny local model to
# .local/models/tiny-llama. Reused while requirements.lock and pyproject.toml are unchanged.
#   ENGINE_PYTHON   the interpreter to build the venv from (default python3; 3.11+)
#   ENGINE_TORCH    replaces the lock's torch pin, e.g. "torch==2.13.0" for a CUDA build on a GPU host
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.local/engine-venv"
model="$root/.local/models/tiny-llama"
python="${ENGINE_PYTHON:-python3}"

"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
  { echo "engine:install: $python is older than Python 3.11" >&2; exit 1; }

pins="$(sed '/^#/d' "$here/requirements.lock")"
if [ -n "${ENGINE_TORCH:-}" ]; then pins="$(printf '%s\n' "$pins" | sed "s|^torch==.*|${ENGINE_TORCH}|")"; fi
key="$(printf '%s\n%s\n' "$pins" "$(cat "$here/pyproject.toml")" | sha256sum | cut -c1-16)"
stamp="$venv/.engine-install-$key"

if [ -f "$stamp" ]; then
  echo "engine:install: $venv is up to date ($key)"
else
  # pip's configured index made the main one: the first configured index is --index-url, the others
  # extra indexes, plus the configured find-links; with none configured pip's own default applies.
  config="$("$python" -m pip config list 2>/dev/null || true)"
  value() { printf '%s\n' "$config" | sed -n "s/^[a-z:]*\.$1='\(.*\)'$/\1/p" | head -n 1; }
  indexes="$(value index-url) $(value extra-index-url)"
  index_args=()
  first=1
  for index in $indexes; do
    if [ "$first" = 1 ]; then index_args+=(--index-url "$index"); first=0; else index_args+=(--extra-index-url "$index"); fi
  done
  for links in $(value find-links); do index_args+=(--find-links "$links"); done
  # The machine's wheel folder (the CPU torch wheel lies there), unless the configuration names it.
  case " ${index_args[*]:-} " in *" /opt/wheels "*) ;; *) [ -d /opt/wheels ] && index_args+=(--find-links /opt/wheels) ;; esac

  echo "engine:install: creating $venv (${index_args[*]:-pip default index})"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  retries=(--retries "${PIP_RETRIES:-0}")
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --no-input "${retries[@]}" "${index_args[@]}" $pins
  "$venv/bin/pip" install --quiet --no-input --no-deps --no-build-isolation -e "$here"
  touch "$stamp"
fi

if [ ! -f "$model/model.safetensors" ]; then
  "$venv/bin/python" -m tinker_engine.tiny_model "$model"
fi
echo "engine:install: python $venv/bin/python, tiny model $model"
