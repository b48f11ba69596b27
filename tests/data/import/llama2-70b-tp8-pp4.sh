#!/bin/bash
# Llama-2-70B with Megatron-LM on 4 DGX H100 nodes: tensor 8 x pipeline 4, sequence parallelism,
# the distributed optimizer, selective recomputation (an example launch line for `comptrain import`).
torchrun --nproc_per_node 8 --nnodes 4 --node_rank $NODE_RANK \
  pretrain_gpt.py \
  --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \
  --group-query-attention --num-query-groups 8 \
  --ffn-hidden-size 28672 --swiglu --normalization RMSNorm \
  --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \
  --seq-length 4096 --max-position-embeddings 4096 --vocab-size 32000 \
  --micro-batch-size 1 --global-batch-size 64 \
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel \
  --use-distributed-optimizer --bf16 --use-flash-attn \
  --recompute-activations \
  --lr 3e-4 --train-iters 1000   # optimisation settings: no effect on memory or time
