// The built-in training corpus: plain English prose written for this project, so `pd2bw train` can
// run with no data file and no download. Its regular, repetitive structure gives a tiny byte-level
// model something learnable within a few hundred steps. Split into several literals because some
// compilers limit the length of one string literal.
#include "data_builtin_corpus.hpp"

namespace pd2bw::executor::detail {
namespace {

constexpr char kCorpus[] =
R"corpus(On the Work of Pipelines

A pipeline is a line of workers who each do one part of a job. The first worker takes the raw
material, does a little to it, and hands it on. The second worker takes what the first one made,
does a little more, and hands it on again. At the end of the line the job is finished. No single
worker does the whole job, and no single worker needs to know the whole job. Each one knows a small
part well.

When the line starts in the morning, only the first worker is busy. The others wait, because nothing
has reached them yet. After a short while the second worker has something to do, then the third, and
soon every worker on the line is busy at the same time. This is the good part of the day. Every pair
of hands is moving, and a finished piece leaves the end of the line at a steady pace.

When the line stops in the evening, the opposite happens. The first worker has nothing new to start,
so the first worker rests. Then the second worker finishes the last piece and rests, and then the
third. The empty stretch at the start and the empty stretch at the end are called the bubble. A wise
foreman tries to keep the bubble small, because a worker who waits is a worker who is not helping.

One way to keep the bubble small is to never stop the line at all. The foreman keeps feeding new
pieces at the front while old pieces are still being finished at the back. The workers at the front
and the workers at the back are then working on different pieces, and sometimes they are working
from different versions of the plan. If the plan changes in the middle of the day, a piece that
started under the old plan should be finished under the old plan. Otherwise the front half of the
piece and the back half of the piece will not fit together.

So the careful foreman keeps two copies of the plan on the wall: the old one and the new one. A piece
that began with the old plan is finished with the old plan. A piece that begins now uses the new
plan. When the last piece that needs the old plan is done, the old copy comes down from the wall and
the next new plan can go up in its place. There are never more than two copies on the wall, and the
line never has to stop.

The workers check their own work as they go. When a piece reaches the end of the line, someone
measures it and writes down how far it was from what was wanted. That note travels back up the line,
from the last worker to the first. Each worker reads the note, thinks about what part of the error
came from their own hands, and writes a smaller note for the worker before them. In this way every
worker learns a little from every piece, and the next plan is a little better than the last one.

)corpus"
R"corpus(A Small Garden Through the Year

In early spring the garden is mostly mud. The beds are bare, the paths are soft, and the air smells
of wet earth. The gardener walks along the rows and pulls the last of the winter weeds. The soil is
turned with a fork, not too deep, and a little compost is spread over the top. Then the gardener
waits for a dry week.

In late spring the seeds go in. Peas go in first, because they like the cold. Then come the carrots
and the beets, then the beans, and last of all the squash, which cannot bear a frost. Each row gets a
small wooden label with the name of the plant and the day it was sown. The gardener waters the rows
in the evening, when the sun is low and the water will not dry away before it sinks in.

In early summer the garden is green and busy. The peas climb their sticks, the beans climb their
strings, and the squash leaves spread wide across the path. The gardener thins the carrots so that
each one has room to grow. The weeds grow too, and the gardener pulls them while they are small,
because a small weed comes out with one finger and a large weed needs a spade.

In late summer the garden gives more than one house can eat. There are beans every day, squash every
day, and tomatoes that ripen faster than they can be picked. The gardener gives bags of beans to the
neighbors, and the neighbors give back jars of jam and loaves of bread. The evenings are long and
warm, and the bees are slow and heavy with pollen.

In autumn the garden slows down. The leaves turn yellow, the stems turn brown, and the last squash
sit fat and orange on the ground. The gardener lifts the potatoes with a fork and lays them out to
dry. The beds are cleared, the stakes are pulled up and stacked in the shed, and a thick layer of
fallen leaves is spread over the soil to keep it warm.

In winter the garden sleeps. Frost makes the dead stems white in the morning, and sometimes snow
covers everything. The gardener sits by the window with a cup of tea and a stack of seed catalogues,
and draws next year's garden on a sheet of paper. The peas will go where the beans were, the beans
will go where the carrots were, and the carrots will go where the peas were. Moving the plants each
year keeps the soil healthy. Then spring comes again, and the garden is mostly mud.

)corpus"
R"corpus(Notes on the Weather

The weather is the state of the air above us: how warm it is, how wet it is, how fast it moves, and
which way it is going. Warm air rises and cool air sinks. When the sun warms the ground, the ground
warms the air just above it, and that air rises like a bubble in a pot of water. As it rises it
cools, and as it cools the water it carries turns into tiny drops. A great many tiny drops make a
cloud.

If the drops in a cloud bump into each other and grow, they become too heavy to float, and they fall
as rain. If the air is cold enough, they fall as snow instead. If the air near the ground is cold
but the air above it is warm, the snow melts on the way down and freezes again when it lands, and the
roads turn to glass. On such mornings it is wise to stay at home.

Wind is air moving from a place where the pressure is high to a place where the pressure is low. The
bigger the difference in pressure, the stronger the wind. A gentle wind moves the leaves. A fresh
wind moves the small branches. A strong wind moves whole trees, and a storm wind breaks them. Sailors
have names for every step on this ladder, and they watch the sky as closely as a baker watches an
oven.

A morning with a red sky often means a wet afternoon, and an evening with a red sky often means a
fair morning. Swallows fly low before rain, because the insects they hunt fly low in damp air.
Clouds that look like thin white feathers, high in the sky, often come a day before a change. Clouds
that pile up tall and dark in the afternoon often bring thunder by evening. None of these signs is
certain, but each one is right more often than it is wrong.

The weather tomorrow is hard to know exactly, and the weather next month is harder still. Small
changes in the air today can grow into large changes in a week. That is why a forecast speaks of
chances: a chance of rain, a chance of wind, a chance of sun. A forecast that says seven chances in
ten of rain is not wrong when it stays dry. It is only wrong if, over many such days, it rains on far
more or far fewer than seven in ten.

)corpus"
R"corpus(The Life of a River

A river begins as rain on a hill. The rain soaks into the ground, and some of it comes out again
lower down as a spring. The spring runs over stones as a small clear stream, so narrow that a child
can step across it. Other streams join it from other springs, and the stream grows. By the time it
reaches the valley it is a river.

In the hills the river is young and fast. It runs straight down the slope, it cuts into the rock,
and it carries sand and pebbles along with it. The water is cold and full of air, and small fish
hide under the stones. The sound of a young river is a loud rush, and it never stops, day or night.

In the valley the river is older and slower. It no longer runs straight. It bends to the left, then
to the right, then to the left again, in long loops across the flat land. On the outside of each bend
the water is fast and eats away the bank. On the inside of each bend the water is slow and drops the
sand it was carrying, building a small beach. Year by year the loops move across the valley.

Near the sea the river is wide and very slow. It spreads out into many channels, with low islands of
mud between them. The water is brown with the fine soil it has carried all the way from the hills.
Birds walk on the mud at low tide and pick at worms, and when the tide comes in the salt water pushes
up the channels and the fresh water pushes down, and the two mix.

People have always lived beside rivers. A river gives water to drink, water for the fields, fish to
eat, and a road for boats. A river also floods. In a wet spring the water rises over the banks and
spreads across the fields, and when it goes down it leaves a new layer of rich soil behind. The
farmers curse the flood in spring and bless it in autumn, when the harvest is heavy.

A river is never the same water twice, but it is always the same river. The water that passes the
bridge this morning will be in the sea by next week, and new water from the hills will take its
place. What stays is the shape: the bends, the banks, the deep pools and the shallow runs. The shape
is what people mean when they give a river a name.

)corpus"
R"corpus(A Day at the Bakery

The baker gets up before the sun. The first job is to light the oven, because a large oven takes a
long time to heat. While it heats, the baker weighs the flour, the water, the salt and the yeast for
the first batch of dough. The numbers are written on a card on the wall: so much flour, so much
water, so much salt, so much yeast. The baker has made this bread a thousand times and still reads
the card every morning.

The dough is mixed until it is smooth, then left in a large bowl under a cloth to rise. While the
first dough rises, the baker mixes the second. While the second rises, the baker shapes the first.
While the first loaves rest on their trays, the baker mixes the third. In this way the baker is never
idle, and the oven is never empty for long. Each batch is one step behind the batch before it, like
workers on a line.

When the loaves go into the oven, the baker throws a cup of water onto the hot floor, and a cloud of
steam fills the oven. The steam keeps the crust soft for the first few minutes, so the loaf can
grow. Then the steam clears, the crust turns hard and brown, and the kitchen fills with the smell of
bread. The baker taps the bottom of a loaf with one finger. If it sounds hollow, it is done.

By the time the sun comes up, the shelves in the front of the shop are full. There are round loaves
and long loaves, dark loaves and white loaves, rolls with seeds and rolls without. The first customers
are always the same: the man who drives the milk truck, the woman who opens the post office, and the
two nurses coming home from the night shift at the hospital. Each one buys the same thing every day.

In the afternoon the shop is quiet. The baker cleans the bowls and the trays, sweeps the flour from
the floor, and writes down how many loaves of each kind were sold. If the round loaves sold out by
noon, tomorrow there will be more round loaves. If the dark loaves were left on the shelf, tomorrow
there will be fewer. Each day's bread is planned from what the day before has taught.

)corpus"
R"corpus(The Keeper of the Light

On a rock at the mouth of the bay there is a lighthouse, and in the lighthouse there is a keeper.
Every evening, a little before sunset, the keeper climbs the stairs to the lamp room. There are one
hundred and twelve stairs, and the keeper has counted them so often that the number no longer needs
counting. At the top the keeper trims the wick, fills the oil, polishes the great glass lens, and
lights the lamp.

The lens turns slowly on a bed of smooth rollers, driven by a weight that hangs down the middle of
the tower. Every few hours the keeper winds the weight back up. As the lens turns, the beam sweeps
across the water: one long flash, then two short flashes, then darkness, then one long flash again.
Every lighthouse on the coast has its own pattern, so a sailor who sees the flashes can tell which
light it is and where the ship must be.

The keeper writes in a log book every night. The time the lamp was lit. The direction and the
strength of the wind. The state of the sea: calm, slight, moderate, rough. The ships that passed,
and which way they were going. The time the lamp was put out in the morning. The book is dull to
read, page after page of the same small entries, but in a storm it is the most useful book in the
world, because it shows what the weather did the last time the sky looked like this.

On clear nights there is little to do but watch. The keeper sits by the window with the log book
open and listens to the weight ticking down the tower. On foggy nights the keeper also sounds the
horn, one long blast every half minute, until the fog lifts. On stormy nights the keeper does not
sleep at all. The keeper has never met most of the sailors the light has kept off the rocks, and
never will.

)corpus"
R"corpus(Questions and Answers

Why does the line keep two copies of the plan? Because a piece that started with the old plan must
finish with the old plan, and a piece that starts now must use the new plan. Two copies are enough,
because no piece lives longer than one round of the line.

Why does the gardener move the plants each year? Because each kind of plant takes different things
from the soil, and moving them gives the soil time to recover. The peas go where the beans were, the
beans go where the carrots were, and the carrots go where the peas were.

Why is the sky red in the evening before a fair morning? Because the sunset light passes through dry
air to the west, and the weather usually comes from the west. Dry air to the west means dry air
tomorrow. The sign is often right, but it is not always right.

Why does a river bend? Because a small bump in the bank pushes the water to the other side, and the
water eats away the other bank, and the bend grows. Fast water on the outside cuts, and slow water
on the inside builds, and the loop moves slowly across the valley.

Why does the baker mix one batch while another rises? Because the oven and the baker should both be
busy all the time. If the baker waited for each batch to bake before starting the next, the morning
would be half over before the shelves were full.

What do the line, the garden, the weather, the river and the bakery have in common? Each one is a
slow process made of many small steps. Each step depends on the step before it. And in each one,
the people who do the work learn from what happened last time and do a little better the next.

The end of the first book. The second book begins with the line again, and the line begins with the
first worker, who takes the raw material, does a little to it, and hands it on.
)corpus";

}  // namespace

std::string_view builtin_corpus_text() {
  return std::string_view(kCorpus, sizeof(kCorpus) - 1);
}

}  // namespace pd2bw::executor::detail
