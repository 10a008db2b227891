#!/bin/sh
# CI check of the chat-template fixtures against the oracle: regenerates every expected
# rendering with Debian's python3-jinja2 (configured as transformers configures it) into a
# temporary directory, then runs the differential tests against both the committed fixtures and
# the regenerated ones.
#
# Usage (from the repository root): tests/jinja/regenerate_and_compare.sh [path/to/jinja_tests]
set -eu

tests_binary="${1:-${DELTASERVE_BUILD_DIR:-build/release}/tests/jinja_tests}"
if [ ! -x "$tests_binary" ]; then
  echo "jinja_tests binary not found at $tests_binary (pass its path as the first argument)" >&2
  exit 2
fi

out_dir="$(mktemp -d)"
trap 'rm -rf "$out_dir"' EXIT

/usr/bin/python3 tools/chat_template_oracle/make_fixtures.py --out "$out_dir"

# Report fixture drift separately from interpreter mismatches: if jinja2's output changed, the
# committed fixtures need regenerating (run make_fixtures.py without --out and commit).
for committed in tests/fixtures/chat_templates/*/cases.jsonl tests/fixtures/jinja/expressions.jsonl; do
  regenerated="$out_dir/${committed#tests/fixtures/}"
  if ! cmp -s "$committed" "$regenerated"; then
    echo "note: $committed differs from a fresh jinja2 rendering ($regenerated)" >&2
  fi
done

DS_JINJA_REGENERATED_FIXTURES="$out_dir" "$tests_binary" \
  --gtest_filter='*ChatTemplateFixtures*:ExpressionFixtures.*'
