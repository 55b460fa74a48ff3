"""What the reranker tests share: the template and head rows of the rerankers made from golden models."""

TEMPLATE = "Judge.</s>Query: {query}\nDocument: {document}\nAnswer:"  # </s> parses to the EOS id
ROWS = [2048, 1000]  # the head's rows: "yes", "no" in a real Qwen3-Reranker
SCALE = 1 / 16  # random weights give logits tens apart: scaled, the softmax is not saturated
QUERY = "what is a panda"
DOCS = ["a bear of China", "the capital of France is Paris", "pandas eat bamboo", "a machine applies forces"]
