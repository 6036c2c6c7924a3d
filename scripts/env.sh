# scripts/env.sh: what this project's offline machines need around a stock Pulumi, and nothing else.
# Sourced by scripts/up, scripts/test and the Makefile; in your shell:  . scripts/env.sh
# With your own Pulumi and a backend you are logged in to, you need none of it (README: With your own
# Pulumi): Pulumi.yaml names the virtualenv, and the program and its providers import from this folder.
_rv_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
# The Pulumi CLI scripts/bootstrap built (with the upstream language host beside it) when no pulumi of
# yours was found; an empty folder otherwise.
export PATH="$_rv_root/.tools/bin:$PATH"
# A local backend inside the ignored state folder; the plugins bootstrap installed (project plugin home);
# no pulumi.com, no update checks, no downloads.
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$_rv_root/.state/backend}"
export PULUMI_HOME="${PULUMI_HOME:-$_rv_root/.state/pulumi-home}"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
export PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=true
# The passphrase that encrypts the dev and test stacks' secrets. It is a development default:
# for any other stack set PULUMI_CONFIG_PASSPHRASE (or _FILE) yourself before running.
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  export PULUMI_CONFIG_PASSPHRASE="rustfs-vllm-dev-only"
fi
unset _rv_root
