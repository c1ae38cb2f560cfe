"""The view layer (Qt-free): for each view of the app and each figure of the headless report, the
inputs it depends on and the arrays it draws.

- forward:    the one forward pass every view shares (masks, head masks, captures), run in a worker
- attention:  the query choice, attention maps per head and layer, rollout, class attention, distance
- position:   position-embedding similarity (this model's, another scheme's), titles
- embeddings: patch-embedding filters, Conv2d = Unfold + Linear, dropout demo, token similarity
- heads:      head importance on the current input, cancellable
- prediction: top-k bars on a fixed 0-100 % axis, the masks' effect in words
- features:   PCA of patch features as colour, [CLS] attention per head, token norms and registers,
              patch correspondence, nearest images and the embedding of a model without classifier
- compare:    two models side by side on the same image, masks and head switches
- relevance:  why the model decides: the METHODS table of relevance maps (rollout, attention-gradient,
              transformer attribution, Grad-CAM, integrated gradients, occlusion), targets, faithfulness
- tables:     parameters per stage / layer / tensor and FLOPs (and multiply-adds) per stage
- build:      a freshly initialised model from a config (the builder)
- lessons:    lesson files (a sequence of app states with captions), read and validated
- figures:    the figure descriptions (plain data) that `gui/figures.py` draws for the app and the report

The app's views read the session, call these functions in a worker, and draw the result; `report.py`
calls the same functions, so both show the same numbers.
"""
