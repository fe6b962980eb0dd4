# Cython's augmenting declarations for digest.py, read only when it is compiled (setup.py):
# the C call that plain Python has no name for (digest.py, "Compiled (Cython), ...").
cdef extern from "Python.h":
    void _gc_untrack "PyObject_GC_UnTrack" (object)
