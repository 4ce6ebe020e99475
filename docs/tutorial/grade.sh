#!/usr/bin/env bash
# The commands of docs/packs/write-your-own.md, "Grade it", as the guide shows them (it includes this
# file): tests/test_tutorial_pack.py runs it and reads the two results.json.  $1: where the outputs go.
set -euo pipefail
cd "$(dirname "$0")"  # docs/tutorial
OUT=${1:-/tmp/ringpack}

# [grade]
export PYTHONPATH=$PWD  # the pack is not installed: its rubric names it as ringpack.pack:PACK
grader rubric validate ringpack/rubric.yaml
grader grade ringpack/reference --rubric ringpack/rubric.yaml --out "$OUT/reference"
grader grade ringpack/template --rubric ringpack/rubric.yaml --out "$OUT/template"
# [/grade]
