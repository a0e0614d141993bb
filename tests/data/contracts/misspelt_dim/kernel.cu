// A well-formed implementation whose contract (beside it) is not.
// astra: entry = scale_rows<T>
// astra: grid = tokens
// astra: block = 128

template <typename T>
__global__ void scale_rows(T* out, const T* x, const T* w, int hidden) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const long long at = (long long)blockIdx.x * hidden + i;
        out[at] = x[at] * w[i];
    }
}
