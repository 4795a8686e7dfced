"""Set-up before training: the distribution strategy, the device configuration, the Keras compatibility fixes."""
