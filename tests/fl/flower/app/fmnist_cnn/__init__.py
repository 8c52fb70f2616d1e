"""Shoal's Flower test app: a quickstart-style CNN on Fashion-MNIST."""
