#!/usr/bin/env bash
# Install pytorch-widedeep beside NumPy 2 for benchmarks/onnx_real.py's "widedeep" model.
#
# pytorch-widedeep 1.7.0 declares numpy<2 (and pulls sentence-transformers, fastparquet, ...),
# which pip cannot resolve beside the NumPy 2 that tensoralg's environment has. Its models run
# under NumPy 2; what `import pytorch_widedeep.models` needs is the list below (its package
# __init__ imports the text and image utilities too, hence spacy, gensim and OpenCV). spacy 3.8
# needs thinc 8.3 (thinc 9 lacks thinc.backends.linalg). Verified 2026-12-05 with NumPy 2.5.5,
# torch 2.13.0 and Python 3.12: the import succeeds and the exported models match onnxruntime.
#
# Usage (inside the environment that runs the benchmarks):
#     bash benchmarks/install_widedeep.sh
set -euo pipefail
python -m pip install --no-deps \
    "pytorch-widedeep==1.7.0" \
    pandas einops torchmetrics lightning-utilities opencv-python-headless \
    gensim smart_open wrapt \
    "spacy>=3.8,<3.9" "thinc>=8.3,<8.4" catalogue confection wasabi blis cymem preshed \
    murmurhash srsly weasel pydantic pydantic-core typing-inspection annotated-types httpx
python -c "import pytorch_widedeep.models" && echo "pytorch-widedeep imports"
