#!/usr/bin/env bash
# staged-five build (main f963831 + DELTASERVE_GPU_STAGED_FIVE, off by default): the matmul kernel suite with it on (=2: every one-row kernel);
# the 27B A/B (off / on / on with carveout 100); the bars with it off (= main); same-bits knobs on the 27B.
set -u
cd "$(dirname "$0")/.."
tar xJf staging/both.tar.xz -C staging
B=staging/gpu_bundle
export LD_LIBRARY_PATH=$PWD/$B/lib
mkdir -p $OUT/l
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/l/device.txt 2>&1
A27="--preset qwen3.6-27b --weights q4_0 --device cuda --context 512 --steps 5 --batch 1,2,4"
A35="--preset qwen3.6-35b-a3b --weights q4_0 --device cuda --context 1024 --steps 10 --batch 1,16"
A35W="--preset qwen3.6-35b-a3b --weights q4_0 --device cuda --context 1024 --steps 10 --batch 64"
DELTASERVE_GPU_STAGED_FIVE=2 timeout 200 $B/kernels/gpu_kernel_tests --only matmul > $OUT/l/kt_matmul_five.log 2>&1; echo "kt rc=$?" >> $OUT/l/kt_matmul_five.log
timeout 300 bash $B/tools/decode_ab.sh $B "$A27" - DELTASERVE_GPU_STAGED_FIVE=1 "DELTASERVE_GPU_STAGED_FIVE=1 DELTASERVE_GPU_SMEM_CARVEOUT=100" DELTASERVE_GPU_STAGED_FIVE=2 > $OUT/l/dec27.log 2>&1
timeout 150 bash $B/tools/decode_ab.sh $B "$A35" - DELTASERVE_GPU_STAGED_FIVE=2 > $OUT/l/dec35.log 2>&1
timeout 150 bash $B/tools/decode_ab.sh $B "$A35W" - > $OUT/l/dec35w.log 2>&1
$B/cli/deltaserve bench decode $A35 2>&1 | grep -E "^settings|^backend" > $OUT/l/settings35.log
# same-bits knobs tuned on the 35B-A3B, on the 27B's one-stream step
timeout 200 bash $B/tools/decode_ab.sh $B "--preset qwen3.6-27b --weights q4_0 --device cuda --context 512 --steps 5 --batch 1" - \
  DELTASERVE_GPU_ATTENTION_COMBINE=fused DELTASERVE_GPU_GDN_STATE_HOME=registers DELTASERVE_GPU_ATTENTION_HEAD_SPLITS=1 > $OUT/l/knobs27.log 2>&1
cd $OUT && tar cJf logs.tar.xz l
