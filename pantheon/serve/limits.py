"""The bounds and defaults of pantheon-serve's settings (the reference's limits where it has one)."""

MAX_MODELS = 16            # the reference's MR_MAX_MODELS
MAX_DIES_PER_MODEL = 8     # the reference's PN_MODEL_MAX_DIES
MAX_CTX_CAP = 1 << 20
MAX_BATCH_SLOTS = 8        # the reference's BS_MAX_USERS
MAX_HTTP_WORKERS = 64
MAX_SESSIONS_LIMIT = 1024
MAX_CPU_DIES = 1024
MAX_NAME_BYTES = 64        # a served model id, as stored in the shared slot table
MAX_PATH_BYTES = 1024      # a model path, as stored in the shared slot table
MAX_RESPONSES_STORE_MB = 1 << 20

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_HTTP_WORKERS = 2
DEFAULT_BATCH_SLOTS = 4
DEFAULT_CPU_DIES = 1
DEFAULT_CTX_CAP = 4096     # what `--ctx-cap 0` resolves to
DEFAULT_MAX_SESSIONS = 8   # what `--max-sessions 0` resolves to
DEFAULT_DIES = ("cpu0",)
DEFAULT_CONNECTION_LIMIT = 1000  # open sockets per HTTP front; idle ones cost a file descriptor, no thread
DEFAULT_HTTP_THREADS = 32        # requests served at once per front (a stream holds one for its life)
DEFAULT_IDLE_TIMEOUT = 60        # seconds a connection may sit idle between requests
DEFAULT_HEADER_TIMEOUT = 10      # seconds from a request's first byte to the end of its headers
DEFAULT_BODY_LIMIT = 16 * 2**20  # bytes per request body
DEFAULT_SSE_KEEPALIVE = 15       # seconds of silence after which a stream gets an SSE comment (nginx cuts at 60)
DEFAULT_RESPONSES_STORE_MB = 256  # stored Responses (store: true) on disk, least recently used evicted beyond it
