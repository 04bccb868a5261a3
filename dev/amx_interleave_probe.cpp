// AMX interleave probe (issue 5, CPU round 14): one (32-row block, head) item of the AMX prefill at
// a time (Q K^T into S, the softmax into P, P V into O), all operands hot, one core; modes: 0 the
// three in sequence, 1 one tile "tick" (a TDP and its loads) per 32-score softmax step running the
// previous item's P V then the next item's Q K^T, 3 as 1 with Q K^T only, 4 Q K^T in bursts at
// the softmax rows' ends (the kernel's shape). Build: g++ -O2 -march=native -mamx-tile -mamx-bf16
// dev/amx_interleave_probe.cpp -o /tmp/amx_interleave_probe && taskset -c 1 /tmp/amx_interleave_probe 512
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <algorithm>
struct Cfg { uint8_t palette=1,start_row=0; uint8_t res[14]={}; uint16_t colsb[16]={}; uint8_t rows[16]={}; };
static double now(){timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
constexpr int D=128;
int T=512;
alignas(64) static uint16_t qh[32*D];
static uint32_t *kt,*vb; static float *S[2],*O[2]; static uint16_t* P[2];
// QK of a 32 x T block into s, as quarters.
struct QK { float* s; int jb=0,c=0,q=0; bool done() const { return jb>=T; }
  inline void tick(){ const int pairs=D/2; const uint32_t* k0=kt+(jb/16)*pairs*16+c/2*16;
    switch(q){
      case 0: if(c==0){_tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);} _tile_loadd(6,k0,64); _tile_loadd(4,qh+c,D*2); _tile_dpbf16ps(0,4,6); q=1; break;
      case 1: _tile_loadd(7,k0+pairs*16,64); _tile_dpbf16ps(1,4,7); q=2; break;
      case 2: _tile_loadd(5,qh+16*D+c,D*2); _tile_dpbf16ps(2,5,6); q=3; break;
      default: _tile_dpbf16ps(3,5,7); q=0; c+=32; if(c==D){ float* o=s+jb; _tile_stored(0,o,T*4);_tile_stored(1,o+16,T*4);_tile_stored(2,o+16*T,T*4);_tile_stored(3,o+16*T+16,T*4); c=0; jb+=32;} }
  } };
struct PV { float* o; uint16_t* p; int c0=0,k=0,q=0; bool done() const { return c0>=D; }
  inline void tick(){ float* oc=o+c0; const uint32_t* v=vb+(k/2)*D+c0;
    switch(q){
      case 0: if(k==0){_tile_loadd(0,oc,D*4);_tile_loadd(1,oc+16,D*4);_tile_loadd(2,oc+16*D,D*4);_tile_loadd(3,oc+16*D+16,D*4);} _tile_loadd(6,v,D*4); _tile_loadd(4,p+k,T*2); _tile_dpbf16ps(0,4,6); q=1; break;
      case 1: _tile_loadd(7,v+16,D*4); _tile_dpbf16ps(1,4,7); q=2; break;
      case 2: _tile_loadd(5,p+16*T+k,T*2); _tile_dpbf16ps(2,5,6); q=3; break;
      default: _tile_dpbf16ps(3,5,7); q=0; k+=32; if(k==T){ _tile_stored(0,oc,D*4);_tile_stored(1,oc+16,D*4);_tile_stored(2,oc+16*D,D*4);_tile_stored(3,oc+16*D+16,D*4); k=0; c0+=32;} }
  } };
struct Queue { PV pv; QK qk; bool has_pv=false, has_qk=false;
  inline void tick(){ if(has_pv && !pv.done()) pv.tick(); else if(has_qk && !qk.done()) qk.tick(); }
  void finish(){ while(has_pv && !pv.done()) pv.tick(); while(has_qk && !qk.done()) qk.tick(); } };
static inline __m512 exp2r(__m512 t){ __m512 r=_mm512_reduce_ps(t,_MM_FROUND_TO_NEG_INF|_MM_FROUND_NO_EXC);
  __m512 p=_mm512_set1_ps(0.0135f); p=_mm512_fmadd_ps(p,r,_mm512_set1_ps(0.052f));p=_mm512_fmadd_ps(p,r,_mm512_set1_ps(0.2414f));
  p=_mm512_fmadd_ps(p,r,_mm512_set1_ps(0.693f));p=_mm512_fmadd_ps(p,r,_mm512_set1_ps(1.0f)); return _mm512_scalef_ps(p,t);}
float msum=0;
int MODE=1; // 0: no ticks in softmax (sequential), 1: one tick per iteration of pass 2, 2: also ticks in pass 1
template<class Tk> void softmax(const float* Sb, uint16_t* Pb, Tk&& tick, int pass1_every){ const __m512 c=_mm512_set1_ps(0.127f);
  for(int h=0;h<32;h+=16){ float mx[16];
    for(int r=0;r<16;++r){ const float* s=Sb+(h+r)*T; __m512 a=_mm512_set1_ps(-1e30f),b=a;
      for(int v=0;v<T;v+=32){a=_mm512_max_ps(a,_mm512_load_ps(s+v));b=_mm512_max_ps(b,_mm512_load_ps(s+v+16)); if(pass1_every && (v/32)%pass1_every==0) tick();}
      mx[r]=_mm512_reduce_max_ps(_mm512_max_ps(a,b));}
    for(int r=0;r<16;++r){ const float* s=Sb+(h+r)*T; uint16_t* p=Pb+(h+r)*T; const __m512 nm=_mm512_set1_ps(-mx[r]*0.127f);
      __m512 s0=_mm512_setzero_ps(),s1=s0;
      for(int v=0;v<T;v+=32){ __m512 t0=_mm512_fmadd_ps(_mm512_load_ps(s+v),c,nm),t1=_mm512_fmadd_ps(_mm512_load_ps(s+v+16),c,nm);
        __m512 p0=exp2r(t0),p1=exp2r(t1); s0=_mm512_add_ps(s0,p0);s1=_mm512_add_ps(s1,p1);
        _mm512_store_si512((__m512i*)(p+v),(__m512i)_mm512_cvtne2ps_pbh(p1,p0)); tick();}
      msum+=_mm512_reduce_add_ps(_mm512_add_ps(s0,s1));}}}
// n items in a row, each: QK (into S[w%2]) , softmax -> P[w%2], PV (into O[w%2]).
void run_items(int n, int mode){
  if(mode==0){ for(int w=0;w<n;w++){ QK q; q.s=S[w%2]; while(!q.done()) q.tick(); softmax(S[w%2],P[w%2],[]{},0); PV v; v.o=O[w%2]; v.p=P[w%2]; while(!v.done()) v.tick(); } return; }
  { QK q; q.s=S[0]; while(!q.done()) q.tick(); }
  if(mode>=3){ for(int w=0;w<n;w++){ QK q; q.s=S[(w+1)%2]; bool has=w+1<n;
      if(mode==3) softmax(S[w%2],P[w%2],[&]{ if(has && !q.done()) q.tick();},0);
      else { // per row: 8 quarter ticks in a burst at the row end (the kernel's shape)
        int it=0; softmax(S[w%2],P[w%2],[&]{ if(++it % (T/32)==0) for(int k=0;k<8 && has && !q.done();k++) q.tick();},0); }
      while(has && !q.done()) q.tick();
      PV v; v.o=O[w%2]; v.p=P[w%2]; while(!v.done()) v.tick(); }
    return; }
  for(int w=0;w<n;w++){ Queue qu; if(w>0){qu.has_pv=true; qu.pv.o=O[(w-1)%2]; qu.pv.p=P[(w-1)%2];} if(w+1<n){qu.has_qk=true; qu.qk.s=S[(w+1)%2];}
    softmax(S[w%2],P[w%2],[&]{qu.tick();}, mode==2?2:0); qu.finish(); }
  { PV v; v.o=O[(n-1)%2]; v.p=P[(n-1)%2]; while(!v.done()) v.tick(); }
}
int main(int argc,char**argv){ if(argc>1)T=atoi(argv[1]);
  syscall(SYS_arch_prctl,0x1023,18);
  kt=(uint32_t*)aligned_alloc(64,T*D*2); vb=(uint32_t*)aligned_alloc(64,T*D*2);
  for(int i=0;i<2;i++){S[i]=(float*)aligned_alloc(64,32*T*4); O[i]=(float*)aligned_alloc(64,32*D*4); P[i]=(uint16_t*)aligned_alloc(64,32*T*2); memset(O[i],0,32*D*4); for(int j=0;j<32*T;j++){S[i][j]=(j%97)*0.1f;P[i][j]=0x3f00;}}
  for(int i=0;i<T*D/2;i++){kt[i]=0x3f803f80u;vb[i]=0x3c003c00u;} for(int i=0;i<32*D;i++)qh[i]=0x3c00;
  Cfg cfg; for(int i=0;i<8;i++){cfg.colsb[i]=64;cfg.rows[i]=16;} _tile_loadconfig(&cfg);
  const int n=16;
  for(int mode: {0,1,3,4,0,1,3,4}){ double best=1e9; for(int k=0;k<7;k++){ double t0=now(); for(int i=0;i<20;i++) run_items(n,mode); best=std::min(best,(now()-t0)/20/n);} 
    printf("T=%d mode %d: %.0f ns per item, %.0f GFLOP/s\n",T,mode,best*1e9,4.0*32*T*D/best/1e9); }
  _tile_release(); return msum>1e30;
}
