"""Class-conditional generators for Fedssyn: DDPM, conditional GAN, β-VAE (one file each)."""
