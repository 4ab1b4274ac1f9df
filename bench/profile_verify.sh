#!/usr/bin/env bash
# Profile the service's verify path under load: bench/profile_read.sh with the argument verify
# (writes /tmp/prof/verify/verify.raw). Run from the checkout's venv: bash bench/profile_verify.sh
exec bash "$(dirname "$0")/profile_read.sh" verify
