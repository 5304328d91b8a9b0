"""The Conversations API (`/v1/conversations`): durable, ordered item lists that responses
read as context (`conversation` on a create) and append to when they finish. Items are the
same rows responses use (`Item`), linked by `ConversationItem`: nothing is copied."""
