"""`/v1/files`: a tenant's uploaded files (the OpenAI SDK's `client.files`), stored through Django's
storage API (store/files.py); `input_file` and `input_image` parts name them by `file_id`."""
