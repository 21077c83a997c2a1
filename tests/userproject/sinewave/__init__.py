"""A user's package: a LightningModule of its own, fitted to a sine wave."""
