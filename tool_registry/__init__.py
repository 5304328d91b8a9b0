"""Tool definitions managed in the admin, and the executors that run them."""
