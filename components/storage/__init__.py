"""Where the weights live: the S3 server (RustFS, the rclone stand-in, or an external one), the
bucket, and each model's upload from its local folder (layout, manifest, the dynamic providers
that talk S3)."""
