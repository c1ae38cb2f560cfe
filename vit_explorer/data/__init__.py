"""Data: the built-in procedural datasets (synthetic.py), CIFAR pickles (cifar.py), ImageFolder
trees (folder.py) behind `datasets.load_data`; images.py reads single images; samples.py writes
the app's sample images."""
