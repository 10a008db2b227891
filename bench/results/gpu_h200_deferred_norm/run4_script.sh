#!/usr/bin/env bash
# main (92b36d5) against the deferred norms + early tile sums (working tree) in one call:
# matmul kernel suite on the new build, then A B B A decode for the 27B and 35B-A3B.
set -u
cd "$(dirname "$0")/.."
tar xJf carry/ab.tar.xz -C carry
export LD_LIBRARY_PATH=$PWD/carry/ab/lib
mkdir -p $OUT/l
timeout 150 carry/ab/new/kernels/gpu_kernel_tests --only matmul > $OUT/l/kt_matmul.log 2>&1; echo "kt rc=$?" >> $OUT/l/kt_matmul.log
A27="--preset qwen3.6-27b --weights q4_0 --device cuda --context 512 --steps 5 --batch 1,2,4"
A35="--preset qwen3.6-35b-a3b --weights q4_0 --device cuda --context 1024 --steps 10 --batch 1,16"
A35W="--preset qwen3.6-35b-a3b --weights q4_0 --device cuda --context 1024 --steps 10 --batch 64"
row() { grep -E '^ +[0-9]+ +[0-9]+ +[0-9.]+ ' | sed "s|^|[$1] |"; }
for b in main new new main; do timeout 60 carry/ab/$b/cli/deltaserve bench decode $A27 2>&1 | row "$b" >> $OUT/l/dec27.log; done
for b in main new new main; do timeout 60 carry/ab/$b/cli/deltaserve bench decode $A35 2>&1 | row "$b" >> $OUT/l/dec35.log; done
for b in main new new main; do timeout 90 carry/ab/$b/cli/deltaserve bench decode $A35W 2>&1 | row "$b" >> $OUT/l/dec35w.log; done
cd $OUT && tar cJf logs.tar.xz l
