"""placeholder"""
def register_bench(bench_app):
    pass
