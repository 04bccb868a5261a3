"""Host emulation of engine_mma_fp8.cuh's fragment mapping for one warp and one 16-key tile: ldmatrix
(plain and .trans, 16-bit elements over e4m3 bytes) from the 128-byte swizzled tile, the k-step
dim order of K and q, the even/odd n-blocks of V and write_output's reorder, checked against Q K^T
and P V computed directly. Run: python3 dev/fp8_fragment_check.py (prints both max errors, ~0)."""
import numpy as np
rng=np.random.default_rng(1)
kCap=128; tile=64; kChunks=kCap//16; kNB=kCap//8
K=rng.integers(0,256,(tile,kCap)).astype(np.uint8)  # bytes (treat value = byte as "decoded" int for check)
V=rng.integers(0,256,(tile,kCap)).astype(np.uint8)
Q=rng.standard_normal((16,kCap))
def tile_offset(r,d):  # 1-byte elements, 128-byte swizzled segments
    width=128; pitch=128; vec=16; within=d%width
    col=((within//vec)^(r&7))*vec+within%vec
    return (d//width)*tile*pitch+r*pitch+col
smemK=np.zeros(tile*((kCap+127)//128)*128,np.uint8); smemV=smemK.copy()
for r in range(tile):
    for d in range(kCap):
        smemK[tile_offset(r,d)]=K[r,d]; smemV[tile_offset(r,d)]=V[r,d]
def ldmatrix(smem, addrs, trans):  # addrs[lane] -> row address (16 bytes) of matrix lane//8, row lane%8
    out=np.zeros((32,4),dtype=object)
    for i in range(4):
        rows=[smem[addrs[i*8+r]:addrs[i*8+r]+16] for r in range(8)]  # 8 rows x 16 bytes = 8x8 b16
        M=[[ (rows[r][2*c], rows[r][2*c+1]) for c in range(8)] for r in range(8)]  # b16 as byte pairs
        for lane in range(32):
            g,t=lane//4,lane%4
            if not trans: e0,e1=M[g][2*t],M[g][2*t+1]
            else: e0,e1=M[2*t][g],M[2*t+1][g]
            out[lane,i]=(e0[0],e0[1],e1[0],e1[1])  # 4 bytes, low first
    return out
key0=16  # key warp 1
# --- S = Q K^T
S=np.zeros((32,2,4))
for c4 in range(0,kChunks,4):
    for nb in range(2):
        addrs=[tile_offset(key0+nb*8+(lane%8), (c4+lane//8)*16) for lane in range(32)]
        b=ldmatrix(smemK,addrs,False)
        # B (16 x 8) from the lanes' bytes, A (16 x 16) from q in the engine's dim order
        for i in range(4):
            ks=c4+i
            B=np.zeros((16,8)); A=np.zeros((16,16))
            for lane in range(32):
                g,t=lane//4,lane%4
                by=b[lane,i]
                B[2*t,g],B[2*t+1,g],B[2*t+8,g],B[2*t+9,g]=by[0],by[1],by[2],by[3]
                d=ks*16+4*t
                A[g,2*t],A[g,2*t+1]=Q[g,d],Q[g,d+1]; A[g+8,2*t],A[g+8,2*t+1]=Q[g+8,d],Q[g+8,d+1]
                A[g,2*t+8],A[g,2*t+9]=Q[g,d+2],Q[g,d+3]; A[g+8,2*t+8],A[g+8,2*t+9]=Q[g+8,d+2],Q[g+8,d+3]
            C=A@B  # 16x8
            for lane in range(32):
                g,t=lane//4,lane%4
                S[lane,nb,0]+=C[g,2*t]; S[lane,nb,1]+=C[g,2*t+1]; S[lane,nb,2]+=C[g+8,2*t]; S[lane,nb,3]+=C[g+8,2*t+1]
ref=Q@K[key0:key0+16].astype(float).T  # 16 x 16
err=0
for lane in range(32):
    g,t=lane//4,lane%4
    for nb in range(2):
        for e in range(4):
            row=g+8*(e>>1); key=nb*8+2*t+(e&1)
            err=max(err,abs(S[lane,nb,e]-ref[row,key]))
print("S max err",err)
# --- O = P V with P = S (any values)
P=rng.standard_normal((16,16))
# P A-fragment from S layout: a0 = P[g][2t,2t+1] from s[0][0..1]; a1 = P[g+8][..] s[0][2..3]; a2 = P[g][2t+8..] s[1][0..1]; a3 s[1][2..3]
O=np.zeros((32,kNB,4))
for c in range(0,kChunks,2):
    addrs=[tile_offset(key0+((lane//8)&1)*8+(lane%8), (c+lane//16)*16) for lane in range(32)]
    b=ldmatrix(smemV,addrs,True)
    for half in range(2):
        for which in range(2):  # 0 even, 1 odd
            B=np.zeros((16,8))
            for lane in range(32):
                g,t=lane//4,lane%4
                lo=b[lane,2*half]; hi=b[lane,2*half+1]
                if which==0: l2=(lo[0],lo[2]); h2=(hi[0],hi[2])
                else: l2=(lo[1],lo[3]); h2=(hi[1],hi[3])
                B[2*t,g],B[2*t+1,g]=l2; B[2*t+8,g],B[2*t+9,g]=h2
            C=P@B
            nbk=2*(c+half)+which
            for lane in range(32):
                g,t=lane//4,lane%4
                O[lane,nbk,0]+=C[g,2*t]; O[lane,nbk,1]+=C[g,2*t+1]; O[lane,nbk,2]+=C[g+8,2*t]; O[lane,nbk,3]+=C[g+8,2*t+1]
# write_output mapping
Out=np.zeros((16,kCap))
for lane in range(32):
    g,t=lane//4,lane%4
    for h in range(2):
        row=g+8*h
        for c in range(kChunks):
            ev=O[lane,2*c]; od=O[lane,2*c+1]
            vals=(ev[2*h],od[2*h],ev[2*h+1],od[2*h+1])
            for j in range(4): Out[row,c*16+4*t+j]=vals[j]
refO=P@V[key0:key0+16].astype(float)
print("O max err",np.abs(Out-refO).max())
