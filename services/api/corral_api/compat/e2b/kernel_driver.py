"""The program a code-interpreter context runs inside the sandbox (``python3 -u -c``): a
persistent namespace executing one request per line read from its FIFO, answering on stdout
with marked JSON lines (anything else a cell prints, e.g. from a subprocess, is that cell's
stdout). Stdlib only, so any image with python3 can host it. Kept as text: it never runs in
the api."""

MARK = "\x1eCORRAL-KERNEL "

SOURCE = r'''
import ast, base64, io, json, linecache, os, sys, time, traceback
MARK = "\x1eCORRAL-KERNEL "
fifo = sys.argv[1]
proto = os.fdopen(os.dup(1), "w", buffering=1)
state = {"rid": None}
def emit(**event):
    event["rid"] = state["rid"]
    proto.write(MARK + json.dumps(event) + "\n")
    proto.flush()
class Stream(io.TextIOBase):
    def __init__(self, name):
        self.name, self.buffer = name, ""
    def writable(self):
        return True
    def write(self, text):
        self.buffer += text
        if "\n" in self.buffer:
            cut = self.buffer.rindex("\n") + 1
            emit(type=self.name, text=self.buffer[:cut], timestamp=time.time_ns() // 1000)
            self.buffer = self.buffer[cut:]
        return len(text)
    def flush(self):
        if self.buffer:
            emit(type=self.name, text=self.buffer, timestamp=time.time_ns() // 1000)
            self.buffer = ""
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
def user_traceback(exc):
    # From the first frame of a cell on: this driver's own frames (python -c's "<string>") are
    # nobody's business; a SyntaxError of the cell has none of its frames, so just its line.
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))
count = 0
if not os.path.exists(fifo):
    os.mkfifo(fifo, 0o600)
requests = os.fdopen(os.open(fifo, os.O_RDWR), "r")  # RDWR: never EOF when a writer leaves
sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
emit(type="ready", pid=os.getpid())
for line in requests:
    try:
        request = json.loads(line)
    except ValueError:
        continue
    state["rid"] = request.get("id")
    saved_env = dict(os.environ)
    os.environ.update(request.get("env") or {})
    count += 1
    code, name = request.get("code", ""), "<cell %d>" % count
    # Its lines, for tracebacks (also of its functions called from later cells).
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        tree = ast.parse(code, name, "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, name, "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), name, "eval"), namespace) if last else None
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            for number in pyplot.get_fignums():
                figure = pyplot.figure(number)
                buffer = io.BytesIO()
                figure.savefig(buffer, format="png")
                emit(type="result", png=base64.b64encode(buffer.getvalue()).decode(), text=repr(figure),
                     is_main_result=False)
                pyplot.close(figure)
        if value is not None:
            emit(type="result", text=repr(value), is_main_result=True)
    except BaseException as exc:
        emit(type="error", name=type(exc).__name__, value=str(exc),
             traceback=user_traceback(exc))
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.stdout.flush()
        sys.stderr.flush()
    emit(type="number_of_executions", execution_count=count)
    emit(type="end")
'''
