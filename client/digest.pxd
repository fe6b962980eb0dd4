# Cython's augmenting declarations for digest.py, read only when it is compiled (setup.py): the
# C that plain Python has no name for (digest.py, "Compiled (Cython), ...").
cdef extern from *:
    """
    #include "structmember.h"

    /* The offset of a plain object slot (a writable T_OBJECT_EX member descriptor, what
       __slots__ makes), or -1 for anything else. */
    static Py_ssize_t bookie_slot_offset(PyObject *descr) {
        PyMemberDef *m;
        if (!PyObject_TypeCheck(descr, &PyMemberDescr_Type)) return -1;
        m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) return -1;
        return m->offset;
    }

    /* A list of new objects of ``type`` (a slotted class), row i's k-th slot (at offsets[k])
       holding columns[k][i]: what object.__new__(type) and each slot descriptor's __set__ do,
       without a call per slot; each object untracked by the garbage collector (the caller's
       promise: the values are atoms, the objects frozen). */
    /* One such object, its k-th slot holding values[k] (a tuple, one value per offset). */
    static PyObject *bookie_new_row(PyObject *type, PyObject *offsets, PyObject *values) {
        PyTypeObject *tp = (PyTypeObject *)type;
        Py_ssize_t k, width = PyTuple_GET_SIZE(offsets), off;
        PyObject *obj;
        if (PyTuple_GET_SIZE(values) != width) {
            PyErr_SetString(PyExc_ValueError, "bookie_new_row: one value per offset");
            return NULL;
        }
        obj = tp->tp_alloc(tp, 0);  /* zeroed: every slot empty */
        if (obj == NULL) return NULL;
        for (k = 0; k < width; k++) {
            PyObject *v = PyTuple_GET_ITEM(values, k);
            off = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, k));
            if (off < (Py_ssize_t)sizeof(PyObject)) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bookie_new_row: bad offset");
                Py_DECREF(obj);
                return NULL;
            }
            Py_INCREF(v);
            *(PyObject **)((char *)obj + off) = v;
        }
        PyObject_GC_UnTrack(obj);
        return obj;
    }

    static PyObject *bookie_new_rows(PyObject *type, PyObject *offsets, PyObject *columns) {
        PyTypeObject *tp = (PyTypeObject *)type;
        Py_ssize_t k, i, n, width = PyTuple_GET_SIZE(offsets), off[8];
        PyObject *cols[8], *out;
        if (width > 8 || PyTuple_GET_SIZE(columns) != width) {
            PyErr_SetString(PyExc_ValueError, "bookie_new_rows: one column per offset, 8 at most");
            return NULL;
        }
        for (k = 0; k < width; k++) {
            off[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, k));
            if (off[k] < (Py_ssize_t)sizeof(PyObject)) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bookie_new_rows: bad offset");
                return NULL;
            }
            cols[k] = PyTuple_GET_ITEM(columns, k);
            if (!PyList_Check(cols[k])
                    || PyList_GET_SIZE(cols[k]) != PyList_GET_SIZE(cols[0])) {
                PyErr_SetString(PyExc_ValueError, "bookie_new_rows: columns are lists of one length");
                return NULL;
            }
        }
        n = width ? PyList_GET_SIZE(cols[0]) : 0;
        out = PyList_New(n);
        if (out == NULL) return NULL;
        for (i = 0; i < n; i++) {
            PyObject *obj = tp->tp_alloc(tp, 0);  /* zeroed: every slot empty */
            if (obj == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            for (k = 0; k < width; k++) {
                PyObject *v = PyList_GET_ITEM(cols[k], i);
                Py_INCREF(v);
                *(PyObject **)((char *)obj + off[k]) = v;
            }
            PyObject_GC_UnTrack(obj);
            PyList_SET_ITEM(out, i, obj);
        }
        return out;
    }
    """
    Py_ssize_t _slot_offset "bookie_slot_offset" (object descr)
    object _new_rows "bookie_new_rows" (object type, tuple offsets, tuple columns)
    object _new_row "bookie_new_row" (object type, tuple offsets, tuple values)
