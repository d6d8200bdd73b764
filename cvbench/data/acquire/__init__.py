"""Acquisition: downloads (checked sizes and digests, resumable) and the ImageNet archives
extracted into the folder-per-class layout the builders read. Imports no other stage."""
