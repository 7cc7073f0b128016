#!/usr/bin/env bash
# Open MPI's launch agent on the namespace cluster (`--mca plm_rsh_agent`):
# `cluster-agent.sh HOST COMMAND...` runs the command (an orted) on HOST
# as an ssh would, through scripts/cluster.sh's `exec`.
set -euo pipefail
host=$1
shift
# Open MPI hands the remote command as words of a shell command line, as
# ssh would: run it through a shell on the host.
exec "$(dirname "${BASH_SOURCE[0]}")/cluster.sh" exec "$host" sh -c "$*"
