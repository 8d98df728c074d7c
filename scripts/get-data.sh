#!/usr/bin/env bash
# Installs the datasets the examples use: Fashion-MNIST (dataset-fashion-mnist, under
# /usr/share/datasets/fashion-mnist) and the King James Bible (bible-kjv, written as plain
# text to data/kjv.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_ensure_data
echo "datasets ready: /usr/share/datasets/fashion-mnist, data/kjv.txt"
