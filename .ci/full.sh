#!/usr/bin/env bash
# Everything .ci/run checks, with the sets it narrows for CI's time at their
# full size (docs/reliability.md, "CI time" says which): Miri's tree-borrows
# and i686 runs on every test that drives unsafe code. Run it before a
# release and after changing unsafe code or the lease protocol.
#
#   bash .ci/full.sh
set -euo pipefail
export CI_FULL=1 CI_BUDGET_SECONDS=${CI_BUDGET_SECONDS:-10800}
exec bash "$(dirname "$0")/run"
